package sim

import (
	"testing"
	"time"
)

// sleepModels are 10 GiB models that load in 20 s and wake from
// level 1 in 0.5 s, on a 24 GiB GPU (two fit): a box where evictions are
// frequent.
func sleepModels(names ...string) map[string]Model {
	out := map[string]Model{}
	for _, name := range names {
		m := simModel(10*gib, 20*time.Second, 50, 8)
		m.Config.SleepLevels = 3
		m.Wake = [2]time.Duration{500 * time.Millisecond, 5 * time.Second}
		out[name] = m
	}
	return out
}

func TestRun_SleepersWakeInsteadOfColdLoads(t *testing.T) {
	trace := randomTrace(3, 300, 0.5, "a", "b", "c")
	run := func(hostMemory uint64) *Result {
		s := setup(t, "prioritylru", "{}", sleepModels("a", "b", "c"), []uint64{24 * gib}, trace)
		s.Router.HostMemory = hostMemory
		res, err := Run(s)
		if err != nil {
			t.Fatal(err)
		}
		if res.Completed != len(trace) {
			t.Fatalf("host memory %d GiB: completed %d of %d (%v)", hostMemory/gib, res.Completed, len(trace), res.ErrorsByCode)
		}
		return res
	}
	stop, sleep := run(0), run(72*gib)
	t.Logf("stop: cold loads %d, swap %.1f s, p95 wait %.2f s; sleep: cold loads %d, wakes %d, sleeps %d, swap %.1f s, p95 wait %.2f s",
		stop.ColdLoads, stop.SwapS, stop.QueueWait.P95, sleep.ColdLoads, sleep.Wakes, sleep.Sleeps, sleep.SwapS, sleep.QueueWait.P95)
	if stop.Wakes != 0 || stop.Sleeps != 0 {
		t.Fatalf("no host memory: %d wakes, %d sleeps; want none", stop.Wakes, stop.Sleeps)
	}
	// Each model is cold-loaded once; every later swap is a wake.
	if sleep.ColdLoads != 3 || sleep.Wakes == 0 || sleep.Sleeps < sleep.Wakes {
		t.Fatalf("with host memory: cold loads %d, wakes %d, sleeps %d; want 3 cold loads and the rest wakes", sleep.ColdLoads, sleep.Wakes, sleep.Sleeps)
	}
	if sleep.SwapS*5 > stop.SwapS {
		t.Fatalf("swap seconds: sleeping %.1f, stopping %.1f; want sleeping at most a fifth", sleep.SwapS, stop.SwapS)
	}
}

func TestRun_HostMemoryForOneSleeperStopsTheRest(t *testing.T) {
	trace := randomTrace(4, 200, 0.5, "a", "b", "c", "d")
	s := setup(t, "prioritylru", "{}", sleepModels("a", "b", "c", "d"), []uint64{24 * gib}, trace)
	s.Router.HostMemory = 12 * gib // two models on the GPU, one 10 GiB sleeper, the fourth stopped
	res, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != len(trace) || res.Wakes == 0 || res.ColdLoads <= 4 {
		t.Fatalf("completed %d of %d, cold loads %d, wakes %d; want all, more than 4 cold loads and some wakes",
			res.Completed, len(trace), res.ColdLoads, res.Wakes)
	}
}
