package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
)

// parseWith parses src as c.yaml with o and returns the config, the errors
// and the warnings as strings.
func parseWith(t *testing.T, src string, o Options) (*Config, []string, []string) {
	t.Helper()
	cfg, warns, err := ParseWith("c.yaml", []byte(src), o)
	var errs, ws []string
	if err != nil {
		var list Errors
		if !errors.As(err, &list) {
			t.Fatalf("error is %T, want Errors: %v", err, err)
		}
		for _, e := range list {
			errs = append(errs, e.Error())
		}
	}
	for _, w := range warns {
		ws = append(ws, w.String())
	}
	return cfg, errs, ws
}

// bindCheck is the check Loadout passes as PortFree (plugins.CheckPortFree,
// which host/config does not import): bind 127.0.0.1:port briefly.
func bindCheck(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

// A port something already listens on is never handed out for ${PORT}: the
// model gets the next free one, and a warning says which port was skipped.
func TestParseWith_PortSkipsTakenPorts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	if taken == 65535 {
		t.Skip("the kernel gave the last port; no next one to move to")
	}
	src := fmt.Sprintf("startPort: %d\nmodels:\n  a: {backend: sim}\n", taken)
	cfg, errs, warns := parseWith(t, src, Options{PortFree: bindCheck})
	eq(t, "errors", errs, nil)
	if got := cfg.Models["a"].Port; got == taken {
		t.Fatalf("model a got port %d, which another listener holds", got)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], fmt.Sprintf("c.yaml:3:3: models.a: port %d skipped for ${PORT}", taken)) {
		t.Errorf("warnings = %q, want one saying port %d was skipped", warns, taken)
	}

	// A cmd model's ${PORT} is substituted with the port it got.
	src = fmt.Sprintf("startPort: %d\nmodels:\n  a:\n    cmd: server --port ${PORT}\n", taken)
	cfg, errs, _ = parseWith(t, src, Options{PortFree: bindCheck})
	eq(t, "errors", errs, nil)
	m := cfg.Models["a"]
	eq(t, "Cmd", m.Cmd, fmt.Sprintf("server --port %d", m.Port))
	eq(t, "Proxy", m.Proxy, fmt.Sprintf("http://127.0.0.1:%d", m.Port))
	if m.Port == taken {
		t.Errorf("cmd model got the taken port %d", taken)
	}
}

// Loadout's own listen port is never handed out, whatever startPort says.
func TestParseWith_PortSkipsListenPort(t *testing.T) {
	src := "startPort: 8080\nmodels:\n  a: {backend: sim}\n  b:\n    cmd: server --port ${PORT}\n"
	cfg, errs, warns := parseWith(t, src, Options{Listen: "127.0.0.1:8080"})
	eq(t, "errors", errs, nil)
	eq(t, "a.Port", cfg.Models["a"].Port, 8081)
	eq(t, "b.Port", cfg.Models["b"].Port, 8082)
	eq(t, "warnings", warns, []string{"c.yaml:3:3: models.a: port 8080 is Loadout's own listen port (--listen 127.0.0.1:8080); skipped for ${PORT}"})

	// Without Options, the file alone decides (llama-swap's numbering).
	cfg, _, _ = parse(t, src)
	eq(t, "a.Port without Options", cfg.Models["a"].Port, 8080)
}

// A cmd model whose proxy points at Loadout's own listen address is an
// error naming file:line; other backends ignore proxy (with a warning).
func TestParseWith_ProxyAtListenAddress(t *testing.T) {
	for _, tc := range []struct {
		listen, proxy string
		bad           bool
	}{
		{"127.0.0.1:8080", "http://127.0.0.1:8080", true},
		{"127.0.0.1:8080", "http://localhost:8080/v1", true},
		{"0.0.0.0:8080", "http://127.0.0.1:8080", true},
		{":8080", "http://localhost:8080", true},
		{"localhost:8080", "http://[::1]:8080", true},
		{"127.0.0.1:80", "http://127.0.0.1", true},
		{"127.0.0.1:8080", "http://127.0.0.1:8081", false},
		{"127.0.0.1:8080", "http://10.1.2.3:8080", false},
	} {
		src := "models:\n  m:\n    cmd: server\n    proxy: " + tc.proxy + "\n"
		_, errs, _ := parseWith(t, src, Options{Listen: tc.listen})
		if !tc.bad {
			eq(t, tc.proxy+" vs "+tc.listen, errs, nil)
			continue
		}
		want := fmt.Sprintf("c.yaml:4:12: models.m.proxy: %s is Loadout's own listen address (%s): the model's requests would be proxied back to Loadout; point proxy at the model server", tc.proxy, tc.listen)
		eq(t, tc.proxy+" vs "+tc.listen, errs, []string{want})
	}
}

func TestParseWith_BadListen(t *testing.T) {
	if _, _, err := ParseWith("c.yaml", []byte("models:\n  a: {backend: sim}\n"), Options{Listen: "8080"}); err == nil || !strings.Contains(err.Error(), `listen address "8080"`) {
		t.Errorf("ParseWith with listen 8080 = %v, want an error naming the listen address", err)
	}
}

// Options.Ports (a reload's): a model that stays keeps its port, so one
// more replica of one model moves no other model's replica (which would
// restart it), and the new replica takes a port no kept model has.
func TestParseWith_PortsKeptAcrossAReload(t *testing.T) {
	before := "startPort: 9000\nrouting: {router: {use: prioritylru}}\nmodels:\n  m: {backend: sim, replicas: 2}\n  slow: {backend: sim, replicas: 2}\n  z: {backend: sim}\n"
	was, errs, _ := parseWith(t, before, Options{})
	if len(errs) > 0 {
		t.Fatalf("errors: %q", errs)
	}
	kept := map[string]int{}
	for id, m := range was.Models {
		kept[id] = m.Port
	}
	after := strings.Replace(before, "m: {backend: sim, replicas: 2}", "m: {backend: sim, replicas: 3}", 1)
	now, errs, _ := parseWith(t, after, Options{Ports: kept})
	if len(errs) > 0 {
		t.Fatalf("errors: %q", errs)
	}
	for id, port := range kept {
		if got := now.Models[id].Port; got != port {
			t.Errorf("%s moved from port %d to %d", id, port, got)
		}
	}
	added := now.Models["m@3"].Port
	for id, port := range kept {
		if port == added {
			t.Errorf("the new replica m@3 got port %d, which %s keeps", added, id)
		}
	}
	// Without the kept ports, the same file moves slow@2 (the replicas
	// are numbered after every model's own port, in model order).
	fresh, _, _ := parseWith(t, after, Options{})
	if fresh.Models["slow@2"].Port == kept["slow@2"] {
		t.Fatalf("slow@2 kept port %d without Options.Ports: the test no longer shows what it guards", kept["slow@2"])
	}
}

// PortTemplates keeps ${PORT} in cmd and proxy (every other macro
// substituted) for a model with an assigned port and its replicas, so the
// backend can move a server whose port is taken at load time; a model
// without ${PORT} gets its Cmd and Proxy as they are.
func TestModel_PortTemplates(t *testing.T) {
	src := `startPort: 7000
routing: {router: {use: prioritylru}}
macros: {flags: "--ctx 4096"}
models:
  a:
    cmd: server --port ${PORT} ${flags}
    replicas: 2
  b:
    cmd: server --port 9000
    proxy: http://127.0.0.1:9000
  c:
    cmd: server --port ${PORT}
    proxy: http://127.0.0.1:${PORT}/v1
`
	cfg, errs, _ := parseWith(t, src, Options{})
	eq(t, "errors", errs, nil)
	for _, tt := range []struct{ id, cmd, proxy string }{
		{"a", "server --port ${PORT} --ctx 4096", "http://127.0.0.1:${PORT}"},
		{ReplicaID("a", 2), "server --port ${PORT} --ctx 4096", "http://127.0.0.1:${PORT}"},
		{"b", "server --port 9000", "http://127.0.0.1:9000"},
		{"c", "server --port ${PORT}", "http://127.0.0.1:${PORT}/v1"},
	} {
		m := cfg.Models[tt.id]
		if m == nil {
			t.Fatalf("no model %s", tt.id)
		}
		cmd, proxy := m.PortTemplates()
		eq(t, tt.id+" cmd", cmd, tt.cmd)
		eq(t, tt.id+" proxy", proxy, tt.proxy)
	}
}
