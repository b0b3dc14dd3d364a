//go:build !linux

package plugins

import "syscall"

// pluginSysProcAttr has nothing to add where there is no Pdeathsig.
func pluginSysProcAttr() *syscall.SysProcAttr { return nil }
