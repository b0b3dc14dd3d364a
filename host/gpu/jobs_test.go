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
