package config

import (
	"time"

	"gopkg.in/yaml.v3"
)

// Liveness is the liveness: block, Loadout's own: how a model server that
// hangs is told from a busy one (host/router's and host/proxy's
// liveness.go). Zero fields take the defaults given on each.
//
//	liveness:
//	  probeInterval: 5   # seconds between health probes of a busy server
//	  probeTimeout: 5    # seconds each probe may take
//	  failures: 3        # failed probes in a row that declare it hung
//	  streamIdle: 120    # seconds an open response may send nothing; 0: never cut
type Liveness struct {
	// ProbeInterval is how often a ready server with requests in flight
	// is asked its health. Default 5 s.
	ProbeInterval time.Duration
	// ProbeTimeout bounds each probe. Default 5 s.
	ProbeTimeout time.Duration
	// Failures is how many probes in a row that fail declare the server
	// hung: it is killed and its model failed. Default 3.
	Failures int
	// StreamIdle is how long a response from a model server or a peer may
	// send nothing once its body has begun. Zero: the default, 120 s;
	// negative (written as 0 in the file): never cut.
	StreamIdle time.Duration
}

// livenessKeys are the keys of the liveness: block.
var livenessKeys = []string{"probeInterval", "probeTimeout", "failures", "streamIdle"}

// liveness decodes the liveness: block.
func (d *decoder) liveness(cfg *Config, n *yaml.Node) {
	for _, p := range d.pairs(n, "liveness") {
		kp := join("liveness", p.name)
		switch p.name {
		case "probeInterval", "probeTimeout":
			if s, ok := d.seconds(p.val, kp, 1); ok {
				if p.name == "probeInterval" {
					cfg.Liveness.ProbeInterval = time.Duration(s) * time.Second
				} else {
					cfg.Liveness.ProbeTimeout = time.Duration(s) * time.Second
				}
			}
		case "failures":
			if i, ok := d.integer(p.val, kp, "a whole number of probes, at least 1"); ok {
				if i < 1 {
					d.errorf(p.val, kp, "want a whole number of probes, at least 1, got %d", i)
				} else {
					cfg.Liveness.Failures = i
				}
			}
		case "streamIdle":
			if s, ok := d.seconds(p.val, kp, 0); ok {
				cfg.Liveness.StreamIdle = time.Duration(s) * time.Second
				if s == 0 {
					cfg.Liveness.StreamIdle = -1 // off
				}
			}
		default:
			d.unknownKey(p.key, kp, livenessKeys)
		}
	}
}
