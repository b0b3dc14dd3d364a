package sdk_test

import (
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// countingHost counts its Demand reads.
type countingHost struct {
	*policytest.Host
	reads int
}

func (h *countingHost) Demand() []sdk.ModelDemand {
	h.reads++
	return h.Host.Demand()
}

// TestDemandAt_Read: a read without again always asks the host; with
// again, at the instant of the last read it keeps that read's counts (no
// request can have arrived in the same event), at another it reads anew.
func TestDemandAt_Read(t *testing.T) {
	h := &countingHost{Host: policytest.NewHost(t, sdk.ModelInfo{Name: "a"})}
	var d sdk.DemandAt
	if got := d.Read(h, 5, true); h.reads != 1 || len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("first read (again, nothing read yet): %d host reads, %+v; want 1, [a]", h.reads, got)
	}
	d.Read(h, 5, true)
	if h.reads != 1 {
		t.Errorf("again at the same instant: %d host reads, want the kept counts (1)", h.reads)
	}
	d.Read(h, 5, false)
	if h.reads != 2 {
		t.Errorf("a read without again: %d host reads, want 2", h.reads)
	}
	if d.Read(h, 6, true); h.reads != 3 || d.At != 6 {
		t.Errorf("again at a later instant: %d host reads, at %d; want 3, 6", h.reads, d.At)
	}
}
