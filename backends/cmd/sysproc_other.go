//go:build unix && !linux

package cmdbackend

import "syscall"

// serverSysProcAttr puts a model server in its own process group; without
// Pdeathsig only Close protects against orphans here.
func serverSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// groupPids knows only the group leader where there is no /proc.
func groupPids(pgid int) []int { return []int{pgid} }

// foreignListener cannot tell who holds a port without /proc; it trusts the
// answer (see the Linux version).
func foreignListener(int, string, int) error { return nil }
