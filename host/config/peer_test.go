package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParse_Peers(t *testing.T) {
	t.Setenv("LOADOUT_TEST_PEER_KEY", "sk-peer")
	cfg, errs, warns := parse(t, `
macros: {host: 10.0.0.2}
models: {local: {backend: sim}}
peers:
  box2:
    proxy: http://${host}:8080
    apiKey: ${env.LOADOUT_TEST_PEER_KEY}
    models: [llama-8b, embeddings/bge, llama-8b]
    health: {interval: 500ms, timeout: 200ms}
  openrouter:
    proxy: https://openrouter.ai/api
    models: [qwen/qwen3]
    timeouts: {connect: 5, responseHeader: 0, idleConn: 120}
`)
	eq(t, "errors", errs, []string(nil))
	eq(t, "warnings", warns, []string{
		`c.yaml:8:40: peers.box2.models[2]: model "llama-8b" is listed twice`,
	})
	eq(t, "ids", cfg.PeerIDs(), []string{"box2", "openrouter"})
	b := cfg.Peers["box2"]
	if b.Proxy != "http://10.0.0.2:8080" || b.APIKey != "sk-peer" || !slices.Equal(b.Models, []string{"llama-8b", "embeddings/bge"}) ||
		b.HealthInterval != 500*time.Millisecond || b.HealthTimeout != 200*time.Millisecond || b.Pos.Line != 5 {
		t.Errorf("box2: %+v", b)
	}
	o := cfg.Peers["openrouter"]
	if o.HealthInterval != DefaultPeerHealthInterval || o.HealthTimeout != DefaultPeerHealthTimeout || o.FullName("qwen/qwen3") != "openrouter/qwen/qwen3" {
		t.Errorf("openrouter: %+v", o)
	}
	// llama-swap's timeouts: what is set (0 disables), its defaults for
	// the rest; Loadout's for responseHeader and passive health.
	if want := (Timeouts{Connect: 5 * time.Second, KeepAlive: 30 * time.Second, TLSHandshake: 10 * time.Second, ExpectContinue: time.Second, IdleConn: 120 * time.Second}); o.Timeouts != want {
		t.Errorf("openrouter's timeouts: %+v, want %+v", o.Timeouts, want)
	}
	if b.Timeouts.ResponseHeader != DefaultPeerResponseHeader || b.HealthFailures != DefaultPeerFailures || b.HealthCoolDown != DefaultPeerCoolDown {
		t.Errorf("box2's defaults: %+v", b)
	}
	cfg, _, _ = parse(t, "models: {a: {backend: sim}}\npeers: {p: {proxy: http://h:1, models: [m], health: {interval: 1}}}\n")
	if p := cfg.Peers["p"]; p.HealthInterval != time.Second || p.HealthTimeout != time.Second {
		t.Errorf("interval 1 s without a timeout: %+v", p)
	}
}

// A box with peers needs no model of its own (a gateway); without peers
// it does.
func TestParse_PeersOnlyGateway(t *testing.T) {
	for _, src := range []string{
		"peers: {b: {proxy: http://h:1, models: [m]}}\n",
		"models:\npeers: {b: {proxy: http://h:1, models: [m]}}\n",
		"models: {}\npeers: {b: {proxy: http://h:1, models: [m]}}\n",
	} {
		cfg, errs, _ := parse(t, src)
		eq(t, src, errs, []string(nil))
		if len(cfg.Models) != 0 || len(cfg.Peers) != 1 {
			t.Errorf("%s: %d models, %d peers", src, len(cfg.Models), len(cfg.Peers))
		}
	}
	_, errs, _ := parse(t, "models: {}\npeers: {}\n")
	eq(t, "no models, no peers", errs, []string{"c.yaml:1:1: models: no models defined: at least one model, or a peer under peers:, is required"})
}

// llama-swap's rules (proxy and models required, full names reserved)
// and Loadout's (health), each at its line.
func TestParse_PeerErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"peers: {p: {models: [m]}}\n",
			"c.yaml:2:9: peers.p.proxy: proxy is required: the peer's base URL, like http://10.0.0.2:8080 (llama-swap's rule)"},
		{"peers: {p: {proxy: 'ftp://h', models: [m]}}\n",
			`c.yaml:2:20: peers.p.proxy: want an http:// or https:// URL with a host, like http://127.0.0.1:8080, got "ftp://h"`},
		{"peers: {p: {proxy: http://h:1}}\n",
			"c.yaml:2:9: peers.p.models: models is required: the ids the peer serves (llama-swap's rule)"},
		{"peers: {p: {proxy: http://h:1, models: ['']}}\n", "c.yaml:2:41: peers.p.models[0]: a model id cannot be empty"},
		{"peers: {p: {proxy: http://h:1, models: [m], healthcheck: {}}}\n",
			`c.yaml:2:45: peers.p.healthcheck: unknown key "healthcheck"`},
		{"peers: {p: {proxy: http://h:1, models: [m], health: {interval: fast}}}\n",
			`c.yaml:2:64: peers.p.health.interval: want a duration like 500ms or 5s, or a whole number of seconds, got "fast"`},
		{"peers: {p: {proxy: http://h:1, models: [m], health: {interval: 1s, timeout: 2s}}}\n",
			"c.yaml:2:77: peers.p.health.timeout: a poll may take at most the interval (1s), got 2s"},
		{"peers: {p: {proxy: http://h:1, models: [m], health: {failures: 0}}}\n",
			"c.yaml:2:64: peers.p.health.failures: want a whole number of requests, at least 1, got 0"},
		{"peers: {p: {proxy: http://h:1, models: [m], health: {coolDown: -1s}}}\n",
			`c.yaml:2:64: peers.p.health.coolDown: want a duration like 500ms or 5s, or a whole number of seconds, got "-1s"`},
		{"peers: {p: {proxy: http://h:1, models: [m], timeouts: {responseHeader: -1}}}\n",
			"c.yaml:2:72: peers.p.timeouts.responseHeader: want a whole number of seconds >= 0, got -1"},
		{"peers: {p: {proxy: http://h:1, models: [m], timeouts: {connect: 5s}}}\n",
			"c.yaml:2:65: peers.p.timeouts.connect: want a whole number of seconds, got \"5s\" (llama-swap counts this key in seconds: write 5)"},
		{"peers: {p: {proxy: http://h:1, models: [m], timeouts: {expectContinue: 1}}}\n",
			`c.yaml:2:56: peers.p.timeouts.expectContinue: unknown key "expectContinue"`},
		{"peers:\n  a: {proxy: http://h:1, models: [b/c]}\n  a/b: {proxy: http://h:2, models: [c]}\n",
			`c.yaml:4:37: peers.a/b.models[0]: peer model name "a/b/c" is ambiguous between peers.a model "b/c" (line 3) and peers.a/b model "c"`},
		{"peers: {p: {proxy: http://h:1, models: [a]}}\n",
			`c.yaml:2:41: peers.p.models[0]: peer model name "p/a" is also the id of model p/a (line 1): the full name of a peer's model is reserved`},
		{"peers: {q: {proxy: http://h:1, models: [x]}}\n",
			`c.yaml:2:41: peers.q.models[0]: peer model name "q/x" is also an alias of model b: the full name of a peer's model is reserved`},
	} {
		src := "models: {p/a: {backend: sim}, b: {backend: sim, aliases: [q/x]}}\n" + tc.src
		_, errs, _ := parse(t, src)
		eq(t, tc.src, errs, []string{tc.want})
	}
	// A peer pointing at Loadout itself would forward to itself.
	_, errs, _ := parseWith(t, "models: {a: {backend: sim}}\npeers: {p: {proxy: 'http://127.0.0.1:8080', models: [m]}}\n", Options{Listen: "127.0.0.1:8080"})
	eq(t, "self", errs, []string{"c.yaml:2:20: peers.p.proxy: http://127.0.0.1:8080 is Loadout's own listen address (127.0.0.1:8080): requests would be forwarded to Loadout itself; point proxy at the other server"})
}

// A peer's filters: (llama-swap's stripParams and setParams) are decoded
// with a model's rules; setParamsByID, a model's alone, is an error at
// its line.
func TestParse_PeerFilters(t *testing.T) {
	cfg, errs, warns := parse(t, `
peers:
  openrouter:
    proxy: https://openrouter.ai/api
    models: [qwen/qwen3]
    filters:
      stripParams: "temperature, top_p"
      setParams: {provider: {zdr: true}}
`)
	eq(t, "errors", errs, []string(nil))
	eq(t, "warnings", warns, []string(nil))
	f := cfg.Peers["openrouter"].Filters
	if !slices.Equal(f.StripParams, []string{"temperature", "top_p"}) || len(f.SetParams) != 1 || f.SetParams[0].Key != "provider" {
		t.Fatalf("filters %+v", f)
	}
	_, errs, _ = parse(t, "peers: {p: {proxy: http://h:1, models: [m], filters: {setParamsByID: {m: {a: 1}}}}}\n")
	eq(t, "errors", errs, []string{`c.yaml:1:71: peers.p.filters.setParamsByID: setParamsByID is a model's filter: a peer's filters take stripParams and setParams (llama-swap's)`})
	_, errs, _ = parse(t, "peers: {p: {proxy: http://h:1, models: [m], filters: {stripParams: model}}}\n")
	if len(errs) != 1 || !strings.Contains(errs[0], "peers.p.filters.stripParams") {
		t.Fatalf("a filter naming model: %v", errs)
	}
}
