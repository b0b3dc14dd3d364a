package config

import (
	"fmt"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
)

// Timeouts bounds the connections to one upstream (llama-swap's timeouts:
// block, of a model or of a peer). Each is a whole number of seconds in
// YAML; 0 disables that bound (for KeepAlive: no TCP keep-alive probes).
// The proxy builds one transport per distinct Timeouts.
type Timeouts struct {
	// Connect bounds the TCP dial (llama-swap's connect).
	Connect time.Duration
	// KeepAlive is the TCP keep-alive probe interval (llama-swap's
	// keepalive).
	KeepAlive time.Duration
	// ResponseHeader bounds the wait for the response headers once the
	// request is written (llama-swap's responseHeader; default 0: a model
	// may think long before its first byte). A request past it fails with
	// 504.
	ResponseHeader time.Duration
	// TLSHandshake bounds the TLS handshake to an https upstream
	// (llama-swap's tlsHandshake).
	TLSHandshake time.Duration
	// ExpectContinue bounds the wait for "100 Continue" after a request
	// that sent "Expect: 100-continue" (llama-swap's expectContinue).
	ExpectContinue time.Duration
	// IdleConn is how long an idle keep-alive connection is kept
	// (llama-swap's idleConn).
	IdleConn time.Duration
}

// DefaultTimeouts are what a model without a timeouts: block gets, and
// what each key left out of one keeps. llama-swap's defaults (those of
// Go's http.DefaultTransport) except Connect, Loadout's 10 s where
// llama-swap's is 30 s: a model server is local, and a dial that takes
// longer is a server that is gone.
var DefaultTimeouts = Timeouts{
	Connect:        10 * time.Second,
	KeepAlive:      30 * time.Second,
	ResponseHeader: 0,
	TLSHandshake:   10 * time.Second,
	ExpectContinue: 1 * time.Second,
	IdleConn:       90 * time.Second,
}

// timeoutKeys are the keys of a model's timeouts: block, llama-swap's;
// peerTimeoutKeys a peer's (llama-swap's schema gives a peer no
// expectContinue).
var (
	timeoutKeys     = []string{"connect", "keepalive", "responseHeader", "tlsHandshake", "expectContinue", "idleConn"}
	peerTimeoutKeys = []string{"connect", "keepalive", "responseHeader", "tlsHandshake", "idleConn"}
)

// timeouts decodes a timeouts: block at path (models.ID.timeouts, or a
// peer's): the keys present replace def's; keys are the ones allowed
// (timeoutKeys or peerTimeoutKeys). This is the one decoder of the block;
// models and peers both call it. Errors, at each key: not a whole number
// of seconds >= 0, an unknown key.
func (d *decoder) timeouts(n *yaml.Node, path string, def Timeouts, keys []string) Timeouts {
	t := def
	for _, p := range d.pairs(n, path) {
		kp := join(path, p.name)
		if !slices.Contains(keys, p.name) {
			d.unknownKey(p.key, kp, keys)
			continue
		}
		var field *time.Duration
		switch p.name {
		case "connect":
			field = &t.Connect
		case "keepalive":
			field = &t.KeepAlive
		case "responseHeader":
			field = &t.ResponseHeader
		case "tlsHandshake":
			field = &t.TLSHandshake
		case "expectContinue":
			field = &t.ExpectContinue
		case "idleConn":
			field = &t.IdleConn
		}
		if s, ok := d.seconds(p.val, kp, 0); ok {
			*field = time.Duration(s) * time.Second
		}
	}
	return t
}

// String lists the bounds for Report: "connect 10s, keepalive 30s,
// responseHeader off, ...".
func (t Timeouts) String() string {
	f := func(d time.Duration) string {
		if d == 0 {
			return "off"
		}
		return duration(d)
	}
	return fmt.Sprintf("connect %s, keepalive %s, responseHeader %s, tlsHandshake %s, expectContinue %s, idleConn %s",
		f(t.Connect), f(t.KeepAlive), f(t.ResponseHeader), f(t.TLSHandshake), f(t.ExpectContinue), f(t.IdleConn))
}
