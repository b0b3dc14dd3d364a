package config

import (
	"maps"
	"net/url"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
)

// Peer defaults, Loadout's (llama-swap's peers have no health checks).
const (
	DefaultPeerHealthInterval = 5 * time.Second  // how often a peer's /api/models is polled
	DefaultPeerHealthTimeout  = 2 * time.Second  // how long one poll may take
	DefaultPeerFailures       = 3                // forwarded requests in a row that fail before the peer is put down
	DefaultPeerCoolDown       = 30 * time.Second // how long it then stays down before one request tries it
)

// DefaultPeerResponseHeader is timeouts.responseHeader's default: how
// long a forwarded request may wait for the peer's answer to begin (its
// response headers and first byte). llama-swap has none by default (its
// schema says 0; its example shows 60), which leaves a client of a peer
// whose inference hangs held for as long as it waits. A peer's headers
// come when its model answers: after the peer loads the model (minutes,
// for a large one), and for a request that does not stream, after the
// whole generation; a Loadout peer with sendLoadingState answers a
// streaming chat request at once. Five minutes covers a cold load and a
// long answer; raise it (or write 0) for longer non-streaming
// generations through peers.
const DefaultPeerResponseHeader = 5 * time.Minute

// defaultPeerTimeouts are a peer's timeouts when its timeouts: does not
// set them: llama-swap's peer defaults (connect 30, keepalive 30,
// tlsHandshake 10, idleConn 90) but for responseHeader
// (DefaultPeerResponseHeader). They apply to forwarded requests, not to
// health checks (health: bounds those).
var defaultPeerTimeouts = Timeouts{Connect: 30 * time.Second, KeepAlive: 30 * time.Second,
	ResponseHeader: DefaultPeerResponseHeader, TLSHandshake: 10 * time.Second,
	ExpectContinue: DefaultTimeouts.ExpectContinue, IdleConn: 90 * time.Second}

// Peer is one entry of `peers:`, llama-swap's: another server (a Loadout,
// a llama-swap, any OpenAI-compatible endpoint) whose models this one
// serves by forwarding requests to it. A peer's model is named
// PEER/MODEL (FullName), and MODEL alone where no full name claims it;
// Loadout adds health checks (HealthInterval) and, when several peers or
// a local model serve the same plain name, routing to a ready one with
// the fewest requests in flight (host/peers).
type Peer struct {
	// ID is the key under peers:, the prefix of its models' full names.
	ID string
	// Pos is where the peer's key is in the file.
	Pos Pos
	// Proxy is the peer's base URL (llama-swap's proxy: http or https with
	// a host); a request's path is appended to it, as llama-swap does:
	// https://openrouter.ai/api + /v1/chat/completions.
	Proxy string
	// APIKey, when set, is sent to the peer with every request and health
	// check as "Authorization: Bearer <key>" and "X-Api-Key: <key>"
	// (llama-swap's apiKey); macros and ${env.VAR} substituted.
	APIKey string
	// Models are the ids the peer serves, as the peer names them
	// (llama-swap's models), in the order written, without repeats.
	Models []string
	// HealthInterval is how often the peer's /api/models is polled, and
	// HealthTimeout how long one poll may take (Loadout's health:
	// {interval, timeout}; defaults DefaultPeerHealthInterval and
	// DefaultPeerHealthTimeout; the timeout is at most the interval).
	HealthInterval, HealthTimeout time.Duration
	// HealthFailures forwarded requests in a row that fail (no answer in
	// time, reset, stalled, a 200 that is not an answer) put the peer
	// down for HealthCoolDown, whatever its polls say; then one request
	// is let through to try it (Loadout's health: {failures, coolDown};
	// defaults DefaultPeerFailures and DefaultPeerCoolDown; host/peers'
	// passive health).
	HealthFailures int
	HealthCoolDown time.Duration
	// Filters are llama-swap's peer filters: (stripParams, setParams),
	// applied to every request forwarded to the peer, as a model's are
	// to its own (a peer's take no setParamsByID).
	Filters Filters
	// Timeouts bound the connections requests are forwarded on
	// (llama-swap's timeouts:).
	Timeouts Timeouts

	modelNodes []*yaml.Node // one per Models entry
	modelIdx   []int        // its index in the YAML list
}

// FullName is the name a peer's model is always reachable by:
// PEER/MODEL (llama-swap's PeerModelFQN). Peer and model ids may both
// contain slashes, so a full name is matched whole, never split.
// host/peers resolves the names clients use.
func (p *Peer) FullName(model string) string { return p.ID + "/" + model }

// peerKeys are the keys a peer may have: llama-swap's and Loadout's
// health.
var peerKeys = []string{"proxy", "apiKey", "models", "health", "timeouts", "filters"}

// PeerIDs returns the peer ids in sorted order.
func (c *Config) PeerIDs() []string { return slices.Sorted(maps.Keys(c.Peers)) }

// peers decodes `peers:` and checks the names its models take (llama-swap's
// ValidatePeerNamespace): a full name PEER/MODEL is reserved, so it may be
// neither a local model's id or alias nor another peer's full name.
func (d *decoder) peers(cfg *Config, n *yaml.Node) {
	cfg.Peers = map[string]*Peer{}
	if n == nil || isNull(n) {
		return
	}
	type claim struct {
		peer, model string
		node        *yaml.Node
	}
	full := map[string]claim{}
	for _, p := range d.pairs(n, "peers") {
		path := join("peers", p.name)
		peer := d.peer(p, path)
		if peer == nil {
			continue
		}
		cfg.Peers[peer.ID] = peer
		for i, m := range peer.Models {
			node, mp := peer.modelNodes[i], index(join(path, "models"), peer.modelIdx[i])
			name := peer.FullName(m)
			if c, dup := full[name]; dup {
				d.errorf(node, mp, "peer model name %q is ambiguous between peers.%s model %q (%s) and peers.%s model %q", name, c.peer, c.model, d.posOf(c.node), peer.ID, m)
				continue
			}
			full[name] = claim{peer.ID, m, node}
			if local, ok := cfg.Models[name]; ok {
				d.errorf(node, mp, "peer model name %q is also the id of model %s (%s): the full name of a peer's model is reserved", name, name, d.place(local.Pos))
			} else if id, ok := cfg.aliases[name]; ok {
				d.errorf(node, mp, "peer model name %q is also an alias of model %s: the full name of a peer's model is reserved", name, id)
			}
		}
	}
}

// peer decodes one peer.
func (d *decoder) peer(p pair, path string) *Peer {
	peer := &Peer{ID: p.name, Pos: d.pos(p.key), HealthInterval: DefaultPeerHealthInterval, HealthTimeout: DefaultPeerHealthTimeout,
		HealthFailures: DefaultPeerFailures, HealthCoolDown: DefaultPeerCoolDown, Timeouts: defaultPeerTimeouts}
	if p.name == "" {
		d.errorf(p.key, path, "a peer id cannot be empty")
		return nil
	}
	if p.val.Kind != yaml.MappingNode {
		d.errorf(p.val, path, "want a mapping with proxy: URL and models: [...], got a %s", kindName(p.val))
		return nil
	}
	var proxy, models *yaml.Node
	listed := 0
	for _, f := range d.pairs(p.val, path) {
		kp := join(path, f.name)
		switch f.name {
		case "proxy":
			proxy = f.val
			if s, ok := d.str(f.val, kp); ok && s != "" {
				peer.Proxy = s
				d.checkProxy(f.val, kp, s, false)
				if u, err := url.Parse(s); err == nil && d.opts.Listen != "" && isListenAddress(u, d.opts.Listen) {
					d.errorf(f.val, kp, "%s is Loadout's own listen address (%s): requests would be forwarded to Loadout itself; point proxy at the other server", s, d.opts.Listen)
				}
			}
		case "apiKey":
			peer.APIKey, _ = d.str(f.val, kp)
		case "models":
			models = f.val
			items, _ := d.items(f.val, kp)
			listed = len(items)
			for i, it := range items {
				s, ok := d.str(it, index(kp, i))
				switch {
				case !ok:
				case s == "":
					d.errorf(it, index(kp, i), "a model id cannot be empty")
				case slices.Contains(peer.Models, s):
					d.warnf(it, index(kp, i), "model %q is listed twice", s)
				default:
					peer.Models = append(peer.Models, s)
					peer.modelNodes = append(peer.modelNodes, it)
					peer.modelIdx = append(peer.modelIdx, i)
				}
			}
		case "health":
			d.peerHealth(peer, f.val, kp)
		case "timeouts":
			peer.Timeouts = d.timeouts(f.val, kp, defaultPeerTimeouts, peerTimeoutKeys)
		case "filters":
			var byID []*yaml.Node
			peer.Filters, byID = d.filters(f.val, kp)
			for _, k := range byID {
				d.errorf(k, join(kp, "setParamsByID"), "setParamsByID is a model's filter: a peer's filters take stripParams and setParams (llama-swap's)")
				peer.Filters.SetParamsByID = nil
			}
		default:
			d.unknownKey(f.key, kp, peerKeys)
		}
	}
	if peer.Proxy == "" {
		n := proxy
		if n == nil {
			n = p.key
		}
		d.errorf(n, join(path, "proxy"), "proxy is required: the peer's base URL, like http://10.0.0.2:8080 (llama-swap's rule)")
	}
	if listed == 0 {
		n := models
		if n == nil {
			n = p.key
		}
		d.errorf(n, join(path, "models"), "models is required: the ids the peer serves (llama-swap's rule)")
	}
	return peer
}

// peerHealth decodes a peer's health: {interval: 5s, timeout: 2s,
// failures: 3, coolDown: 30s}.
func (d *decoder) peerHealth(peer *Peer, n *yaml.Node, path string) {
	var timeoutNode *yaml.Node
	for _, f := range d.pairs(n, path) {
		kp := join(path, f.name)
		switch f.name {
		case "interval":
			if v, ok := d.duration(f.val, kp); ok {
				peer.HealthInterval = v
			}
		case "timeout":
			timeoutNode = f.val
			if v, ok := d.duration(f.val, kp); ok {
				peer.HealthTimeout = v
			}
		case "failures":
			if i, ok := d.integer(f.val, kp, "a whole number of requests, at least 1"); ok {
				if i < 1 {
					d.errorf(f.val, kp, "want a whole number of requests, at least 1, got %d", i)
				} else {
					peer.HealthFailures = i
				}
			}
		case "coolDown":
			if v, ok := d.duration(f.val, kp); ok {
				peer.HealthCoolDown = v
			}
		default:
			d.unknownKey(f.key, kp, []string{"interval", "timeout", "failures", "coolDown"})
		}
	}
	if timeoutNode == nil {
		peer.HealthTimeout = min(peer.HealthTimeout, peer.HealthInterval)
	} else if peer.HealthTimeout > peer.HealthInterval {
		d.errorf(timeoutNode, join(path, "timeout"), "a poll may take at most the interval (%s), got %s", peer.HealthInterval, peer.HealthTimeout)
	}
}

// duration decodes a positive duration: a Go duration ("500ms", "5s",
// "1m") or a whole number of seconds.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		s, ok := d.seconds(n, path, 1)
		return time.Duration(s) * time.Second, ok
	}
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		if v, err := time.ParseDuration(n.Value); err == nil && v > 0 {
			return v, true
		}
	}
	d.errorf(n, path, "want a duration like 500ms or 5s, or a whole number of seconds, got %s", describe(n))
	return 0, false
}
