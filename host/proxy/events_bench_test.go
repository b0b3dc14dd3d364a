package proxy

import (
	"os"
	"testing"

	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/observe"
	"github.com/loadout-dev/loadout/host/router"
)

// benchEvents, when LOADOUT_BENCH_EVENTS=1, gives a test env the event
// stream as `loadout serve` has it: the run loop's observer publishing on
// a ring, request summaries on it, and one reader draining it (a UI open).
// The proxy benchmark run with and without it measures their cost
// (docs/BENCHMARKS.md).
func benchEvents(t testing.TB, cfg *router.Config) *events.Bus {
	if os.Getenv("LOADOUT_BENCH_EVENTS") != "1" {
		return nil
	}
	bus := events.New(0)
	var ids []string
	for _, m := range testCatalog {
		ids = append(ids, m.ID)
	}
	cfg.Observer = observe.New(ids, bus)
	sub := bus.Subscribe(0)
	go func() {
		for range sub.Wake() {
			for {
				evs, err := sub.Ready(256)
				if err != nil || len(evs) == 0 {
					break
				}
				for _, ev := range evs {
					_ = ev.JSON()
				}
			}
		}
	}()
	t.Cleanup(bus.Close)
	return bus
}
