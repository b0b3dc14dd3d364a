package plugins

import "syscall"

// pluginSysProcAttr makes the kernel send the plugin SIGTERM when the host
// dies, so Serve's handler stops the model servers.
func pluginSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
