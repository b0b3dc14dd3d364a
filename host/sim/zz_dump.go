package sim

import (
	"fmt"
	"os"
)

// dump writes per-request rows and the timeline when LOADOUT_SIM_DUMP is set (analysis only).
func (e *engine) dump() {
	p := os.Getenv("LOADOUT_SIM_DUMP")
	if p == "" {
		return
	}
	f, err := os.Create(p)
	if err != nil {
		return
	}
	defer f.Close()
	for i, r := range e.reqs {
		if r == nil {
			continue
		}
		fmt.Fprintf(f, "R,%d,%s,%.6f,%.6f,%.6f,%.6f,%v\n", i, r.q.Model, r.arrival.Seconds(), r.granted.Seconds(), r.first.Seconds(), r.finished.Seconds(), r.ok)
	}
	for _, s := range e.obs.tl.Swaps {
		fmt.Fprintf(f, "S,%.6f,%s,%v,%v\n", s.T, s.Target, s.Cold, s.Evict)
	}
	for _, s := range e.obs.tl.Residency {
		fmt.Fprintf(f, "Z,%s,%s,%.6f,%.6f,%v\n", s.Model, s.State, s.From, s.To, s.Devices)
	}
}
