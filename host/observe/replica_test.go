package observe

import (
	"testing"

	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A model with replicas stays ready while one of them crashes or is
// scaled in: each is counted and published as an eviction of the model,
// naming the replica; an unload of the model counts each replica once,
// with the unload's reason.
func TestObserver_ReplicaEvictions(t *testing.T) {
	bus := events.New(64)
	o := New([]string{"m"}, bus)
	status := func(model string, replicas ...string) router.ModelStatus {
		st := router.ModelStatus{Model: "m", State: model}
		for i, s := range replicas {
			id := "m"
			if i > 0 {
				id = "m@" + string(rune('1'+i))
			}
			st.Replicas = append(st.Replicas, router.ReplicaStatus{Replica: i + 1, ID: id, State: s})
		}
		return st
	}
	count := func(reason string) float64 { return testutil.ToFloat64(o.evictions.WithLabelValues("m", reason)) }
	o.ModelChanged(status("ready", router.ReplicaLoaded, router.ReplicaLoaded))
	o.ModelChanged(status("ready", router.ReplicaLoaded, router.ReplicaLoadFailed)) // m@2 crashed
	if count(ReasonExited) != 1 {
		t.Errorf("a replica that crashed: exited = %v, want 1", count(ReasonExited))
	}
	o.ModelChanged(status("ready", router.ReplicaLoaded, router.ReplicaLoaded))
	o.ModelChanged(status("ready", router.ReplicaLoaded, router.ReplicaUnloading)) // scaled in
	if count(ReasonPolicy) != 1 {
		t.Errorf("a replica scaled in: policy = %v, want 1", count(ReasonPolicy))
	}
	o.ModelChanged(status("ready", router.ReplicaLoaded, router.ReplicaLoaded))
	o.Unloading([]string{"m"}, ReasonUnload)
	o.ModelChanged(status("stopping", router.ReplicaUnloading, router.ReplicaUnloading))
	if count(ReasonUnload) != 2 || count(ReasonPolicy) != 1 {
		t.Errorf("an unload of both replicas: unload = %v, policy = %v; want 2, 1 (one each, not the model's too)", count(ReasonUnload), count(ReasonPolicy))
	}
	evs, _ := bus.History([]string{events.TypeEviction}, 10)
	if len(evs) != 4 {
		t.Fatalf("%d eviction events, want 4", len(evs))
	}
	if e, _ := evs[0].Data().(Eviction); e.Replica != "m@2" || e.Reason != ReasonExited {
		t.Errorf("the crash's event %+v, want replica m@2, exited", e)
	}
}
