package config

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultSessionHeaders is ui.activity.session_id when absent
// (llama-swap's default).
var DefaultSessionHeaders = []string{"X-Session-ID", "X-Litellm-Session-Id"}

// ui decodes `ui:` (llama-swap's): activity.session_id, the request
// headers that name a session, into Config.SessionHeaders ([] turns the
// lookup off). Loadout's client id (X-Loadout-Client, x_client_id) is its
// session: a request that names no client is given the first non-empty
// of these headers as its client, shown in the activity log and the UI.
func (d *decoder) ui(cfg *Config, n *yaml.Node) {
	for _, p := range d.pairs(n, "ui") {
		kp := join("ui", p.name)
		if p.name != "activity" {
			d.unknownKey(p.key, kp, []string{"activity"})
			continue
		}
		for _, q := range d.pairs(p.val, kp) {
			qp := join(kp, q.name)
			if q.name != "session_id" {
				d.unknownKey(q.key, qp, []string{"session_id"})
				continue
			}
			items, ok := d.items(q.val, qp)
			if !ok {
				continue
			}
			cfg.SessionHeaders = []string{}
			for i, it := range items {
				s, ok := d.str(it, index(qp, i))
				if !ok {
					continue
				}
				if s = strings.TrimSpace(s); s == "" || strings.ContainsAny(s, " \t:") {
					d.errorf(it, index(qp, i), "want a header name, got %q", s)
					continue
				}
				cfg.SessionHeaders = append(cfg.SessionHeaders, s)
			}
		}
	}
}

// metricsMaxInMemory decodes llama-swap's metricsMaxInMemory, how many
// request records it keeps in memory for its activity view, into
// Config.EventRing: the size of the in-memory ring of /api/events (request
// summaries among them), which the web UI replays. Loadout's activity log
// itself is on disk (serve's --activity-max-rows bounds it), as
// llama-swap's is with store.path set.
func (d *decoder) metricsMaxInMemory(cfg *Config, n *yaml.Node) {
	v, ok := d.integer(n, "metricsMaxInMemory", "a whole number of records")
	if !ok {
		return
	}
	if v < 1 {
		d.errorf(n, "metricsMaxInMemory", "want 1 or more records, got %d", v)
		return
	}
	cfg.EventRing = v
}

// DefaultCaptureBuffer is the capture ring's budget when captureBuffer is
// absent: llama-swap's default of 10 MB, in bytes (MiB, as llama-swap
// multiplies by 1024*1024).
const DefaultCaptureBuffer = 10 << 20

// captureBuffer decodes llama-swap's captureBuffer, megabytes of memory
// for request/response captures (0 turns capture off), into
// Config.CaptureBuffer in bytes.
func (d *decoder) captureBuffer(cfg *Config, n *yaml.Node) {
	v, ok := d.integer(n, "captureBuffer", "a whole number of megabytes")
	if !ok {
		return
	}
	if v < 0 || v > 1<<20 {
		d.errorf(n, "captureBuffer", "want 0 (capture off) to %d megabytes, got %d", 1<<20, v)
		return
	}
	cfg.CaptureBuffer = int64(v) << 20
}
