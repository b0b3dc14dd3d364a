package gpu

import (
	"errors"
	"fmt"
	"slices"
)

// ErrDeviceBusy: AcquireDevices for a device that another owner holds a
// lease on (DeviceBusyError names it and the holders).
var ErrDeviceBusy = errors.New("GPU device is held by another owner")

// DeviceBusyError is AcquireDevices' error when a device it asks for
// already has holders: a job takes whole devices, never a share of one.
type DeviceBusyError struct {
	Device  int      // device index
	Holders []string // the owners holding leases on it, sorted
}

func (e *DeviceBusyError) Error() string {
	return fmt.Sprintf("gpu %d is held by %v", e.Device, e.Holders)
}

// Is makes errors.Is(err, ErrDeviceBusy) true.
func (e *DeviceBusyError) Is(target error) bool { return target == ErrDeviceBusy }

// AcquireDevices grants owner (a job's task id) whole devices, all or
// nothing: each device in devices must have no holder, and the lease takes
// all its leasable memory (Total − margin, in bytes), so its free memory is
// 0 until the lease is released and no model is placed on it (a job and a
// model never double-book a GPU). The driver's free figure is not checked:
// a device nobody in Loadout holds is the job's to take. The lease is
// marked as a job's, and Leases shows it with Kind "job"; Release ends
// it, as a model's.
//
// evict names models the job evicts (their servers are being stopped):
// their leases are released in the same step, so a device only they hold
// counts as unheld, and nothing can be placed on it between their
// eviction and the job's lease. A job's lease is never evicted: a job
// named in evict still makes its devices busy. Call it before the evicted
// servers have exited only if the job's process starts after they have.
//
// It returns the lease (bytes by device) or, changing nothing, ErrHeld if
// owner already holds one, ErrUnknownDevice, or *DeviceBusyError
// (errors.Is ErrDeviceBusy) naming the first busy device in index order.
func (l *Ledger) AcquireDevices(owner string, devices []int, evict ...string) (map[int]uint64, error) {
	devs, err := l.inv.Devices()
	if err != nil {
		return nil, fmt.Errorf("gpu lease for %s: %w", owner, err)
	}
	devices = slices.Sorted(slices.Values(devices))
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, held := l.leases[owner]; held {
		return nil, fmt.Errorf("gpu lease for %s: %w", owner, ErrHeld)
	}
	lease := make(map[int]uint64, len(devices))
	for _, d := range devices {
		dev, ok := find(devs, d)
		if !ok {
			return nil, fmt.Errorf("gpu lease for %s: %w %d", owner, ErrUnknownDevice, d)
		}
		holders := l.holdersOf(d)
		if slices.ContainsFunc(holders, func(h string) bool { return l.isJob(h) || !slices.Contains(evict, h) }) {
			return nil, fmt.Errorf("gpu lease for %s: %w", owner, &DeviceBusyError{Device: d, Holders: holders})
		}
		// At least 1 byte, so the lease names the device even when the
		// margin takes it all.
		lease[d] = max(satSub(dev.Total, l.margin), 1)
	}
	for _, e := range evict {
		if e != owner && !l.isJob(e) {
			l.release(e)
		}
	}
	l.grant(owner, lease)
	if l.jobs == nil {
		l.jobs = map[string]bool{}
	}
	l.jobs[owner] = true
	return lease, nil
}

// OnJobRelease registers fn to be called after a job's lease (one taken
// with AcquireDevices) ends in Release: on the goroutine that released it,
// outside the ledger's lock, so fn may read the ledger. fn must not block:
// it is how the model router hears that memory a job held is back (it
// re-examines its queue), and the job runner is the caller.
func (l *Ledger) OnJobRelease(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released = append(slices.Clip(l.released), releaseHook{fn: fn, jobs: true})
}

// UnheldDevices returns, in index order, the devices no owner holds a
// lease on: the devices a job may take now with AcquireDevices.
func (l *Ledger) UnheldDevices() ([]int, error) {
	devs, err := l.inv.Devices()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for _, d := range devs {
		if len(l.holdersOf(d.Index)) == 0 {
			out = append(out, d.Index)
		}
	}
	slices.Sort(out)
	return out, nil
}

// holdersOf returns the owners with a lease naming device d, sorted. An
// owner with an empty lease (a model of unknown size) holds no device.
// l.mu is held.
func (l *Ledger) holdersOf(d int) []string {
	var out []string
	for o, lease := range l.leases {
		if _, ok := lease[d]; ok {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// isJob reports whether owner's lease was taken with AcquireDevices.
// l.mu is held.
func (l *Ledger) isJob(owner string) bool { return l.jobs[owner] }
