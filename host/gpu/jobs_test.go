package gpu

import (
	"errors"
	"testing"
)

func TestLedger_AcquireDevices_WholeDevicesNeverShared(t *testing.T) {
	const gib = 1 << 30
	l := NewLedger(NewDeclared([]DeclaredDevice{{Name: "a", Memory: 8 * gib}, {Name: "b", Memory: 8 * gib}, {Name: "c", Memory: 8 * gib}}), 0)
	if err := l.Acquire("model", map[int]uint64{0: gib}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireDevices("job1", []int{0, 1}); !errors.Is(err, ErrDeviceBusy) {
		t.Fatalf("job on a model's device: got %v, want ErrDeviceBusy", err)
	}
	if _, ok := l.Lease("job1"); ok {
		t.Fatal("a refused AcquireDevices left a lease")
	}
	lease, err := l.AcquireDevices("job1", []int{2, 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(lease) != 2 || lease[1] != 8*gib || lease[2] != 8*gib {
		t.Fatalf("lease %v, want all of devices 1 and 2", lease)
	}
	// A model cannot be placed on a job's device.
	if _, err := l.Reserve("m2", gib, []int{1}, nil); !errors.Is(err, ErrDoesNotFit) {
		t.Fatalf("model on a job's device: got %v, want ErrDoesNotFit", err)
	}
	if got, _ := l.UnheldDevices(); len(got) != 0 {
		t.Fatalf("UnheldDevices = %v, want none", got)
	}
	leases, err := l.Leases()
	if err != nil {
		t.Fatal(err)
	}
	if h := leases[1].Holders; len(h) != 1 || h[0].Owner != "job1" || h[0].Kind != "job" {
		t.Fatalf("device 1 holders %+v, want job1 as a job", h)
	}
	if h := leases[0].Holders; len(h) != 1 || h[0].Kind != "model" {
		t.Fatalf("device 0 holders %+v, want the model", h)
	}
	l.Release("job1")
	if got, _ := l.UnheldDevices(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("UnheldDevices after release = %v, want [1 2]", got)
	}
}

// A job that evicts models takes their devices in the same step as their
// leases end; a device held by a model it does not evict, or by another
// job, stays busy, and a refusal releases nothing.
func TestLedger_AcquireDevices_EvictingModels(t *testing.T) {
	const gib = 1 << 30
	l := NewLedger(NewDeclared([]DeclaredDevice{{Name: "a", Memory: 8 * gib}, {Name: "b", Memory: 8 * gib}, {Name: "c", Memory: 8 * gib}}), 0)
	if err := l.Acquire("m0", map[int]uint64{0: gib}); err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire("m01", map[int]uint64{0: gib, 1: gib}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireDevices("job0", []int{2}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		devices []int
		evict   []string
		busy    int
	}{
		{[]int{0}, []string{"m0"}, 0},             // m01 is on 0 too
		{[]int{1, 2}, []string{"m01", "job0"}, 2}, // a job is never evicted
	} {
		var be *DeviceBusyError
		if _, err := l.AcquireDevices("job1", tc.devices, tc.evict...); !errors.As(err, &be) || be.Device != tc.busy {
			t.Fatalf("AcquireDevices(%v, evict %v) = %v, want device %d busy", tc.devices, tc.evict, err, tc.busy)
		}
		for _, o := range []string{"m0", "m01", "job0"} {
			if _, ok := l.Lease(o); !ok {
				t.Fatalf("a refused AcquireDevices released %s", o)
			}
		}
	}
	lease, err := l.AcquireDevices("job1", []int{0}, "m0", "m01")
	if err != nil || len(lease) != 1 || lease[0] != 8*gib {
		t.Fatalf("AcquireDevices evicting m0 and m01 = %v, %v; want all of device 0", lease, err)
	}
	for _, o := range []string{"m0", "m01"} {
		if _, ok := l.Lease(o); ok {
			t.Fatalf("evicted %s still holds its lease", o)
		}
	}
	if got, _ := l.UnheldDevices(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("UnheldDevices = %v, want [1] (m01's other device)", got)
	}
}

// LeasesWithoutJobs shows the devices as they will be once the jobs end;
// OnJobRelease's hooks run when a job's lease ends, not a model's.
func TestLedger_JobsLeftOutAndTheirReleaseHeard(t *testing.T) {
	const gib = 1 << 30
	l := NewLedger(NewDeclared([]DeclaredDevice{{Name: "a", Memory: 8 * gib}, {Name: "b", Memory: 8 * gib}}), gib/2)
	released := 0
	l.OnJobRelease(func() {
		if _, err := l.Leases(); err != nil { // the hook may read the ledger
			t.Error(err)
		}
		released++
	})
	if l.HasJobs() {
		t.Fatal("HasJobs on an empty ledger")
	}
	if err := l.Acquire("m", map[int]uint64{1: 2 * gib}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireDevices("job", []int{0}); err != nil {
		t.Fatal(err)
	}
	if !l.HasJobs() {
		t.Fatal("HasJobs with a job's lease: false")
	}
	now, _ := l.Leases()
	without, err := l.LeasesWithoutJobs()
	if err != nil {
		t.Fatal(err)
	}
	if now[0].Free != 0 || len(now[0].Holders) != 1 {
		t.Fatalf("device 0 now: %+v, want the job holding it all", now[0])
	}
	if d := without[0]; d.Free != 8*gib-gib/2 || d.Leased != 0 || len(d.Holders) != 0 {
		t.Fatalf("device 0 without jobs: %+v, want empty", d)
	}
	if d := without[1]; d.Free != now[1].Free || d.Leased != 2*gib || len(d.Holders) != 1 {
		t.Fatalf("device 1 without jobs: %+v, want the model's lease as now (%+v)", d, now[1])
	}
	l.Release("m")
	if released != 0 {
		t.Fatal("a model's release ran the job hooks")
	}
	l.Release("job")
	l.Release("job")
	if released != 1 {
		t.Fatalf("job hooks ran %d times, want once", released)
	}
	if l.HasJobs() {
		t.Fatal("HasJobs after the release")
	}
}
