package config

import (
	"net"
	"net/url"

	"gopkg.in/yaml.v3"
)

// assignPort hands model id its port for ${PORT}: the one Options.Ports
// gives it, else the next from *next (llama-swap's rule: one per model,
// counting up from startPort in sorted model-id order), skipping
// Loadout's own listen port and the ports Options.PortFree refuses, each
// with a warning at the model's key, and, silently, the ports
// Options.Ports keeps for other models. It reports false, with an error,
// when the ports run out past 65535.
func (d *decoder) assignPort(id string, key *yaml.Node, path string, cfg *Config, next *int) (int, bool) {
	if port, ok := d.opts.Ports[id]; ok && port > 0 && port != d.listenPort {
		return port, true
	}
	for ; *next <= 65535; *next++ {
		port := *next
		if d.kept(port) {
			continue
		}
		if port == d.listenPort {
			d.warnf(key, path, "port %d is Loadout's own listen port (--listen %s); skipped for ${PORT}", port, d.opts.Listen)
			continue
		}
		if d.opts.PortFree != nil {
			if err := d.opts.PortFree(port); err != nil {
				d.warnf(key, path, "port %d skipped for ${PORT}: %v", port, err)
				continue
			}
		}
		*next++
		return port, true
	}
	d.errorf(key, path, "ran out of ports: startPort %d plus one per model passes 65535", cfg.StartPort)
	return 0, false
}

// kept reports whether Options.Ports keeps port for a model.
func (d *decoder) kept(port int) bool {
	for _, p := range d.opts.Ports {
		if p == port {
			return true
		}
	}
	return false
}

// isListenAddress reports whether u connects to listen (host:port), the
// address Loadout serves on: the same port, and a host that is listen's
// own, a loopback address or "localhost" when listen is loopback or every
// address, or any address of this machine when listen is every address.
func isListenAddress(u *url.URL, listen string) bool {
	lhost, lport, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if port != lport {
		return false
	}
	host := u.Hostname()
	if host == lhost {
		return true
	}
	lip := net.ParseIP(lhost)
	every := lhost == "" || lip != nil && lip.IsUnspecified()
	ip := net.ParseIP(host)
	loopback := host == "localhost" || ip != nil && ip.IsLoopback()
	if loopback && (every || lhost == "localhost" || lip != nil && lip.IsLoopback()) {
		return true
	}
	if every && ip != nil {
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return false
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// PortTemplates returns the model's Cmd and Proxy with the ${PORT} macro
// left in (every other macro substituted) when Port was assigned for it,
// else Cmd and Proxy themselves. The host hands these to the backend
// with Port (plugins.ModelSpec: the backend substitutes ${PORT}), so a
// backend that finds Port taken at load time — a second Loadout on the
// box took it while this model was stopped — starts the server on a free
// port instead and the upstream URL follows (cmdbackend.Backend.Start).
func (m *Model) PortTemplates() (cmd, proxy string) {
	if m.Port == 0 || m.cmdTemplate == "" {
		return m.Cmd, m.Proxy
	}
	if m.Proxy == "" {
		return m.cmdTemplate, ""
	}
	return m.cmdTemplate, m.proxyTemplate
}
