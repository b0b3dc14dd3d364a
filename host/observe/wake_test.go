package observe

import (
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestObserver_WakesAreNotColdLoads(t *testing.T) {
	o := New([]string{"m"}, nil)
	t0 := time.Unix(1000, 0)
	o.SwapStarted(router.SwapInfo{Target: "m", Cold: true, Wake: true, Time: t0})
	o.SwapEnded(router.SwapInfo{Target: "m", Time: t0.Add(400 * time.Millisecond)})
	if got := testutil.ToFloat64(o.wakes.WithLabelValues("m", "ok")); got != 1 {
		t.Errorf("wakes ok = %v, want 1", got)
	}
	if got := testutil.ToFloat64(o.loads.WithLabelValues("m", "ok")); got != 0 {
		t.Errorf("cold loads after a wake = %v, want 0", got)
	}
	if n := testutil.CollectAndCount(o.wakeTime, "loadout_model_wake_seconds"); n != 1 {
		t.Errorf("wake time series = %d, want 1", n)
	}

	// A wake that fails is a failed wake and a cold load.
	o.SwapStarted(router.SwapInfo{Target: "m", Cold: true, Wake: true, Time: t0})
	o.SwapEnded(router.SwapInfo{Target: "m", Time: t0.Add(30 * time.Second), WakeError: "wake timed out"})
	if got := testutil.ToFloat64(o.wakes.WithLabelValues("m", "failed")); got != 1 {
		t.Errorf("wakes failed = %v, want 1", got)
	}
	if got := testutil.ToFloat64(o.loads.WithLabelValues("m", "ok")); got != 1 {
		t.Errorf("cold loads after a failed wake = %v, want 1", got)
	}
}
