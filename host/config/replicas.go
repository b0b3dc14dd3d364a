package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/loadout-dev/loadout/sdk/placement"
)

// MaxReplicas bounds a model's replicas, max_replicas (or replicas:) at
// most this many: each is a server process of its own.
const MaxReplicas = 64

// replicaSuffix matches the suffix of a replica's id ("@2"): a configured
// model id may not end so.
var replicaSuffix = regexp.MustCompile(`@[0-9]+$`)

// ReplicaID is the id of replica k (1-based) of the model id: the model's
// own id for replica 1, "id@k" for the others. Each replica is a row of
// the run loop's process table of its own (host/router), with its own
// server process, port and GPU lease.
func ReplicaID(id string, k int) string {
	if k <= 1 {
		return id
	}
	return fmt.Sprintf("%s@%d", id, k)
}

// ModelOf is the model a process-table row belongs to: "m" for replica
// "m@2", the id itself for a model's own row (replica 1) or any other id.
// The inverse of ReplicaID; unambiguous because a configured model id may
// not end in @ and a number.
func ModelOf(id string) string {
	if loc := replicaSuffix.FindStringIndex(id); loc != nil && loc[0] > 0 {
		return id[:loc[0]]
	}
	return id
}

// replicaKeys are where a model's replica keys are, for errors found after
// parsing (CheckPlacement).
type replicaKeys struct {
	replicas, min, max *yaml.Node
}

// node is the key an error about the replica count points at: the one
// that set the minimum.
func (k replicaKeys) node() (*yaml.Node, string) {
	switch {
	case k.replicas != nil:
		return k.replicas, "replicas"
	case k.min != nil:
		return k.min, "min_replicas"
	}
	return k.max, "max_replicas"
}

// modelReplicas decodes a model's `replicas: N` (min_replicas and
// max_replicas both N) or `min_replicas`/`max_replicas` (default 1 and
// min_replicas), each between 1 and MaxReplicas.
func (d *decoder) modelReplicas(m *Model, fields map[string]pair, path string) {
	m.MinReplicas, m.MaxReplicas = 1, 1
	get := func(key string) (*yaml.Node, int, bool) {
		p, ok := fields[key]
		if !ok {
			return nil, 0, false
		}
		n, ok := d.integer(p.val, join(path, key), "a whole number of server processes")
		if !ok {
			return p.val, 0, false
		}
		if n < 1 || n > MaxReplicas {
			d.errorf(p.val, join(path, key), "want 1 to %d replicas, got %d", MaxReplicas, n)
			return p.val, 0, false
		}
		return p.val, n, true
	}
	var n, lo, hi int
	var okN, okLo, okHi bool
	m.replicaKeys.replicas, n, okN = get("replicas")
	m.replicaKeys.min, lo, okLo = get("min_replicas")
	m.replicaKeys.max, hi, okHi = get("max_replicas")
	if m.replicaKeys.replicas != nil && (m.replicaKeys.min != nil || m.replicaKeys.max != nil) {
		d.errorf(m.replicaKeys.replicas, join(path, "replicas"), "set replicas (a fixed number), or min_replicas and max_replicas (a range the scheduler scales within), not both")
		return
	}
	switch {
	case okN:
		m.MinReplicas, m.MaxReplicas = n, n
	case okLo && okHi && lo > hi:
		d.errorf(m.replicaKeys.max, join(path, "max_replicas"), "max_replicas %d is below min_replicas %d (%s)", hi, lo, d.posOf(m.replicaKeys.min))
	default:
		if okLo {
			m.MinReplicas, m.MaxReplicas = lo, lo
		}
		if okHi {
			m.MaxReplicas = hi
		}
	}
}

// expandReplicas adds, for every model with MaxReplicas > 1, its replicas
// 2 to MaxReplicas to cfg.Models (ReplicaID), each a copy of the model
// with its own port for ${PORT}, assigned after every model's own so that
// adding replicas moves no other model's port. A configured id that looks
// like a replica's is an error.
func (d *decoder) expandReplicas(cfg *Config, src map[string]*modelSrc, nextPort *int) {
	ids := cfg.ModelIDs()
	for _, id := range ids {
		if replicaSuffix.MatchString(id) {
			d.errorf(src[id].key, join("models", id), "a model id may not end in @ and a number: that names a replica (replica 2 of model m is m@2)")
		}
	}
	for _, id := range ids {
		m := cfg.Models[id]
		if m.MaxReplicas <= 1 {
			continue
		}
		m.Replica = 1
		for k := 2; k <= m.MaxReplicas; k++ {
			r := *m
			r.ID, r.ReplicaOf, r.Replica = ReplicaID(id, k), id, k
			r.Aliases, r.Unlisted = nil, true
			if m.Port != 0 {
				node, key := m.replicaKeys.node()
				port, ok := d.assignPort(r.ID, node, join(join("models", id), key), cfg, nextPort)
				if !ok {
					return
				}
				r.Port = port
				r.Cmd = strings.ReplaceAll(m.cmdTemplate, "${PORT}", fmt.Sprint(port))
				r.Proxy = strings.ReplaceAll(m.proxyTemplate, "${PORT}", fmt.Sprint(port))
				if m.Proxy == "" {
					r.Proxy = ""
				}
			}
			cfg.Models[r.ID] = &r
		}
	}
}

// groupReplicas puts every replica in its model's group (llama-swap's
// groups list models; a model's replicas go where it goes).
func groupReplicas(cfg *Config) {
	for _, g := range cfg.Groups {
		for _, id := range slices.Clone(g.Members) {
			m := cfg.Models[id]
			if m == nil {
				continue
			}
			for k := 2; k <= m.MaxReplicas; k++ {
				if rid := ReplicaID(id, k); !slices.Contains(g.Members, rid) {
					g.Members = append(g.Members, rid)
				}
			}
		}
	}
}

// Replicas returns the ids of model id's replicas in order, its own id
// first (ReplicaID); nil for an unknown id or a replica's.
func (c *Config) Replicas(id string) []string {
	m, ok := c.Models[id]
	if !ok || m.ReplicaOf != "" {
		return nil
	}
	out := make([]string, 0, max(m.MaxReplicas, 1))
	for k := 1; k <= max(m.MaxReplicas, 1); k++ {
		out = append(out, ReplicaID(id, k))
	}
	return out
}

// ServedIDs returns the ids clients may ask for, sorted: every model but
// the replicas (ModelIDs lists those too).
func (c *Config) ServedIDs() []string {
	var out []string
	for _, id := range c.ModelIDs() {
		if c.Models[id].ReplicaOf == "" {
			out = append(out, id)
		}
	}
	return out
}

// checkReplicas reports a model whose min_replicas its placement
// constraint can never hold at once (each replica prefers a device of its
// own, but may share one): usable is each allowed device's memory beyond
// the margin, in bytes. Only a model with a constraint (gpus: or split:)
// and a declared vram: is checked; for the others a replica that cannot
// be placed fails when it is started, with the ledger's reason.
func (m *Model) checkReplicas(usable []uint64, need uint64, where string) *Error {
	if m.MinReplicas <= 1 || need == 0 {
		return nil
	}
	copies := uint64(0)
	var sum uint64
	for _, u := range usable {
		copies += u / need
		sum += u
	}
	if m.Split == placement.SplitAlways || (copies == 0 && m.Split != placement.SplitNever) {
		copies = sum / need // split over the devices, each copy its share
	}
	if copies >= uint64(m.MinReplicas) {
		return nil
	}
	node, key := m.replicaKeys.node()
	e := &Error{Pos: m.Pos, Key: join(join("models", m.ID), key),
		Message: fmt.Sprintf("%d replicas of vram: %s do not fit on %s at once: they hold %d", m.MinReplicas, formatSize(int64(need)), where, copies)}
	if node != nil {
		e.Line, e.Column = node.Line, node.Column
	}
	return e
}
