package gpu

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"sync"
)

// Ledger records leases: bytes of GPU memory on specific devices held by an
// owner (a model id or a job id). It never over-commits a device: a lease
// is granted, all or nothing, only if every device it names has the memory
// free, where a device's free memory is
//
//	min(driver-reported free, Total − leased − margin)
//
// (drivers report free memory late, so the ledger's own accounting bounds
// it; Ollama's scheduler does the same). Every figure is in bytes. A Ledger
// is safe for concurrent use: the run loop changes it and the admin API
// reads it. It reads the inventory outside its lock, so a slow driver call
// never blocks a reader of the leases for long.
type Ledger struct {
	inv    Inventory
	margin uint64

	mu     sync.Mutex
	leases map[string]map[int]uint64 // owner → device → bytes
	leased map[int]uint64            // device → bytes, summed over owners
	jobs   map[string]bool           // owners whose lease is a job's (AcquireDevices)
	// rules are the placement rules Reserve applies (SetPlacement).
	rules Placement
	// released are called after a lease ends in Release (OnRelease,
	// OnJobRelease).
	released []releaseHook
}

// releaseHook is a function Release calls, for every lease or (jobs) for
// jobs' leases only.
type releaseHook struct {
	fn   func()
	jobs bool
}

// NewLedger returns an empty ledger over inv. margin is the per-device
// reserve in bytes that no lease may take (CUDA contexts, allocator slack,
// processes Loadout does not know about), typically a few hundred MiB on a
// real GPU; it may be 0.
func NewLedger(inv Inventory, margin uint64) *Ledger {
	return &Ledger{inv: inv, margin: margin, leases: map[string]map[int]uint64{}, leased: map[int]uint64{}}
}

// SetPlacement makes p the placement rules of every later Reserve: the
// box's pack or spread, and each model's Constraint (its gpus: and
// split:). serve sets them from the configuration at start and on every
// reload; leases already granted stay where they are. The ledger keeps p's
// map as it is: do not change it afterwards.
func (l *Ledger) SetPlacement(p Placement) {
	l.mu.Lock()
	l.rules = p
	l.mu.Unlock()
}

// Inventory returns the inventory the ledger reads.
func (l *Ledger) Inventory() Inventory { return l.inv }

// Margin returns the per-device reserve, in bytes.
func (l *Ledger) Margin() uint64 { return l.margin }

// free is a device's free memory once credit bytes of its leases are
// released: the driver's figure plus the credit (those processes are still
// stopping, so the driver does not count their memory free yet), bounded by
// the accounting. l.mu is held.
func (l *Ledger) free(dev Device, credit uint64) uint64 {
	driver := min(satAdd(dev.Free, credit), dev.Total)
	leased := l.leased[dev.Index] - min(credit, l.leased[dev.Index])
	return min(driver, satSub(dev.Total, satAdd(leased, l.margin)))
}

// Acquire grants owner a lease of perDevice (bytes by device index), all or
// nothing. It fails, changing nothing, with ErrHeld if owner already holds
// a lease, with ErrUnknownDevice for an index the inventory lacks, and with
// *InsufficientError (errors.Is ErrInsufficient) naming the first device,
// in index order, that lacks the memory. Devices with 0 bytes are left out
// of the lease.
func (l *Ledger) Acquire(owner string, perDevice map[int]uint64) error {
	devs, err := l.inv.Devices()
	if err != nil {
		return fmt.Errorf("gpu lease for %s: %w", owner, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, held := l.leases[owner]; held {
		return fmt.Errorf("gpu lease for %s: %w", owner, ErrHeld)
	}
	for _, d := range SortedDevices(perDevice) {
		need := perDevice[d]
		if need == 0 {
			continue
		}
		dev, ok := find(devs, d)
		if !ok {
			return fmt.Errorf("gpu lease for %s: %w %d", owner, ErrUnknownDevice, d)
		}
		if free := l.free(dev, 0); need > free {
			return fmt.Errorf("gpu lease for %s: %w", owner, &InsufficientError{Device: d, Need: need, Free: free})
		}
	}
	l.grant(owner, perDevice)
	return nil
}

// Reserve places owner's need bytes and leases them, in one step, after
// releasing the leases of the owners in evict (the models a swap stops). It
// places on exactly devices when given (a swapper's choice: Split over
// them), else where PlaceUnder says under the placement rules
// (SetPlacement); either way with no margin beyond the ledger's own.
// Devices given that owner's Constraint does not allow (a device outside
// its gpus:, a split under split: never, fewer than all its devices under
// split: always) are refused with ErrConstraint. The evicted models' processes are still running when a
// swap starts, so each device's driver-reported free memory is credited
// with what their leases held on it; call WaitFree before starting owner's
// process. It returns the placement (bytes by device; empty for a need of
// 0, which still records an empty lease) or, changing nothing, ErrHeld,
// ErrUnknownDevice, or *DoesNotFitError (errors.Is ErrDoesNotFit) — also
// matching ErrHeldByJob when it would fit once the jobs' leases end.
func (l *Ledger) Reserve(owner string, need uint64, devices []int, evict []string) (map[int]uint64, error) {
	devs, err := l.inv.Devices()
	if err != nil {
		return nil, fmt.Errorf("gpu lease for %s: %w", owner, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, held := l.leases[owner]; held {
		return nil, fmt.Errorf("gpu lease for %s: %w", owner, ErrHeld)
	}
	// place places need on the free memory after releasing those leases:
	// on exactly devices when given, else where PlaceUnder says.
	c := l.rules.Models[owner]
	place := func(releasing []string) (map[int]uint64, error) {
		free := l.freeAfter(devs, releasing)
		if len(devices) == 0 {
			return PlaceUnder(need, free, 0, c, l.rules.Pack)
		}
		if need > 0 && !c.IsZero() {
			chosen := make([]int32, len(devices))
			for i, d := range devices {
				chosen[i] = int32(d)
			}
			if !c.Rule(0, false).Conforms(chosen, toPlacement(free)) {
				return nil, fmt.Errorf("%w: devices %v, the model's %s", ErrConstraint, devices, c)
			}
		}
		on := make([]DeviceFree, 0, len(devices))
		for _, d := range devices {
			i := slices.IndexFunc(free, func(f DeviceFree) bool { return f.Index == d })
			if i < 0 {
				return nil, fmt.Errorf("%w %d", ErrUnknownDevice, d)
			}
			on = append(on, free[i])
		}
		slices.SortFunc(on, func(a, b DeviceFree) int { return a.Index - b.Index })
		return Split(need, on, 0)
	}
	placement, err := place(evict)
	if err != nil && errors.Is(err, ErrDoesNotFit) {
		// Would it fit once the jobs holding GPUs end? Then it is not a
		// misfit but a wait.
		var jobs []string
		for o := range l.jobs {
			jobs = append(jobs, o)
		}
		if _, jerr := place(append(slices.Clone(evict), jobs...)); len(jobs) > 0 && jerr == nil {
			return nil, fmt.Errorf("gpu lease for %s: %w: %w", owner, ErrHeldByJob, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gpu lease for %s: %w", owner, err)
	}
	for _, e := range evict {
		if e != owner {
			l.release(e)
		}
	}
	l.grant(owner, placement)
	return maps.Clone(placement), nil
}

// freeAfter returns every device's free memory once the leases of releasing
// are gone (see free). l.mu is held.
func (l *Ledger) freeAfter(devs []Device, releasing []string) []DeviceFree {
	credit := map[int]uint64{}
	for i, e := range releasing {
		if slices.Contains(releasing[:i], e) {
			continue
		}
		for d, b := range l.leases[e] {
			credit[d] += b
		}
	}
	out := make([]DeviceFree, len(devs))
	for i, dev := range devs {
		out[i] = DeviceFree{Index: dev.Index, Free: l.free(dev, credit[dev.Index])}
	}
	return out
}

// Release ends owner's lease and reports whether it held one. Releasing
// twice is harmless.
func (l *Ledger) Release(owner string) bool {
	l.mu.Lock()
	job := l.isJob(owner)
	released := l.release(owner)
	hooks := l.released
	l.mu.Unlock()
	if released {
		for _, h := range hooks {
			if job || !h.jobs {
				h.fn()
			}
		}
	}
	return released
}

// OnRelease registers fn to be called after any lease, a model's or a
// job's, ends in Release: on the goroutine that released it, outside the
// ledger's lock, so fn may read the ledger. fn must not block: it is how
// the job runner hears that devices may be free (host/jobs: a queued job
// is admitted when they are, not at its next poll). Leases that end
// because Reserve or AcquireDevices hands their memory to another owner
// (evict) do not call it: those devices are not free.
func (l *Ledger) OnRelease(fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released = append(slices.Clip(l.released), releaseHook{fn: fn})
}

func (l *Ledger) release(owner string) bool {
	lease, ok := l.leases[owner]
	if !ok {
		return false
	}
	for d, b := range lease {
		if l.leased[d] -= b; l.leased[d] == 0 {
			delete(l.leased, d)
		}
	}
	delete(l.leases, owner)
	delete(l.jobs, owner)
	return true
}

func (l *Ledger) grant(owner string, perDevice map[int]uint64) {
	lease := make(map[int]uint64, len(perDevice))
	for d, b := range perDevice {
		if b > 0 {
			lease[d] = b
			l.leased[d] += b
		}
	}
	l.leases[owner] = lease
}

// Resize replaces owner's lease with perDevice, as when the measured usage
// of a loaded model replaces its estimate. The memory is already in use, so
// only the accounting bounds it (the driver's free figure already counts
// it, and the margin is for new leases): it fails, changing nothing, with
// *InsufficientError if a device would have more leased than its total,
// ErrUnknownDevice, or ErrNoLease if owner holds none.
func (l *Ledger) Resize(owner string, perDevice map[int]uint64) error {
	devs, err := l.inv.Devices()
	if err != nil {
		return fmt.Errorf("gpu lease for %s: %w", owner, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.leases[owner]
	if !ok {
		return fmt.Errorf("gpu lease for %s: %w", owner, ErrNoLease)
	}
	for _, d := range SortedDevices(perDevice) {
		need := perDevice[d]
		if need <= old[d] {
			continue
		}
		dev, ok := find(devs, d)
		if !ok {
			return fmt.Errorf("gpu lease for %s: %w %d", owner, ErrUnknownDevice, d)
		}
		others := l.leased[d] - old[d]
		if satAdd(others, need) > dev.Total {
			return fmt.Errorf("gpu lease for %s: %w", owner, &InsufficientError{Device: d, Need: need, Free: satSub(dev.Total, others)})
		}
	}
	l.release(owner)
	l.grant(owner, perDevice)
	return nil
}

// Lease returns a copy of owner's lease (bytes by device) and whether it
// holds one.
func (l *Ledger) Lease(owner string) (map[int]uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lease, ok := l.leases[owner]
	return maps.Clone(lease), ok
}

// AppendLease appends owner's lease to devices and bytes, in device index
// order (what SortedDevices gives), and reports whether owner holds one:
// Lease without the copy, for a caller that reads the lease of every
// model (a policy's snapshot, on every plan).
func (l *Ledger) AppendLease(owner string, devices []int32, bytes []uint64) ([]int32, []uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lease, ok := l.leases[owner]
	from := len(devices)
	for d, b := range lease {
		// Insertion by index: a lease spans a handful of devices.
		i := len(devices)
		devices, bytes = append(devices, 0), append(bytes, 0)
		for ; i > from && devices[i-1] > int32(d); i-- {
			devices[i], bytes[i] = devices[i-1], bytes[i-1]
		}
		devices[i], bytes[i] = int32(d), b
	}
	return devices, bytes, ok
}

// DeviceLeases is one device in Leases: the body of GET /api/gpus. Memory
// figures are bytes.
type DeviceLeases struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	Name  string `json:"name"`
	// Total is the device's memory.
	Total uint64 `json:"total"`
	// Free is what a new lease can take: min(DriverFree, Total − Leased −
	// Margin).
	Free uint64 `json:"free"`
	// Leased is the sum of the holders' leases.
	Leased uint64 `json:"leased"`
	// DriverFree is what the driver reports free (Total for a declared
	// device).
	DriverFree uint64 `json:"driver_free"`
	// Margin is the ledger's per-device reserve.
	Margin uint64 `json:"margin"`
	// Utilization is the driver's utilization rate in percent, nil (and
	// absent from the JSON) when it reports none (Device.Utilization).
	Utilization *int `json:"utilization_percent,omitempty"`
	// Holders are the leases on this device, by owner.
	Holders []Holder `json:"holders"`
}

// Holder kinds: what holds a lease (Holder.Kind).
const (
	HolderModel = "model" // a model server's lease (Reserve, Acquire)
	HolderJob   = "job"   // a job's whole-device lease (AcquireDevices)
)

// Holder is one owner's lease on one device.
type Holder struct {
	Owner string `json:"owner"` // model id or job id
	Bytes uint64 `json:"bytes"`
	// Kind is "job" for a job's whole-device lease (AcquireDevices),
	// "model" otherwise.
	Kind string `json:"kind"`
}

// Leases returns every device with its free memory and its holders, in
// index order.
func (l *Ledger) Leases() ([]DeviceLeases, error) { return l.leasesView(false) }

// LeasesWithoutJobs is Leases as it will be once every job's lease
// (AcquireDevices) has ended: job holders left out, their bytes neither
// leased nor taken from Free. It answers "would this fit were it not for
// the jobs?" (host/router asks its swapper that, to tell a model that must
// wait for a job from one that can never load).
func (l *Ledger) LeasesWithoutJobs() ([]DeviceLeases, error) { return l.leasesView(true) }

// HasJobs reports whether any job holds a lease.
func (l *Ledger) HasJobs() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.jobs) > 0
}

func (l *Ledger) leasesView(withoutJobs bool) ([]DeviceLeases, error) {
	devs, err := l.inv.Devices()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	owners := slices.Sorted(maps.Keys(l.leases))
	out := make([]DeviceLeases, len(devs))
	for i, dev := range devs {
		free, leased := l.figures(dev, withoutJobs)
		dl := DeviceLeases{
			Index: dev.Index, UUID: dev.UUID, Name: dev.Name,
			Total: dev.Total, Free: free, Leased: leased,
			DriverFree: dev.Free, Margin: l.margin, Utilization: dev.Utilization, Holders: []Holder{},
		}
		for _, o := range owners {
			if b := l.leases[o][dev.Index]; b > 0 {
				kind := HolderModel
				if l.isJob(o) {
					if withoutJobs {
						continue
					}
					kind = HolderJob
				}
				dl.Holders = append(dl.Holders, Holder{Owner: o, Bytes: b, Kind: kind})
			}
		}
		out[i] = dl
	}
	return out, nil
}

// figures are dev's free and leased bytes as Leases reports them, or
// LeasesWithoutJobs (withoutJobs): the jobs' bytes neither leased nor
// taken from free. l.mu is held.
func (l *Ledger) figures(dev Device, withoutJobs bool) (free, leased uint64) {
	var jobBytes uint64 // what jobs hold on dev, when they are left out
	if withoutJobs {
		for o := range l.jobs {
			jobBytes += l.leases[o][dev.Index]
		}
	}
	return l.free(dev, jobBytes), l.leased[dev.Index] - jobBytes
}

// DeviceFigures is one device's memory as Leases reports it, without its
// holders: what a policy's snapshot carries of each GPU.
type DeviceFigures struct {
	Index               int
	Name                string
	Total, Free, Leased uint64
}

// AppendFigures appends every device's figures, as Leases (or, with
// withoutJobs, LeasesWithoutJobs) reports them, to dst: Leases without
// the holders and their allocations, for a caller that reads them on
// every plan.
func (l *Ledger) AppendFigures(dst []DeviceFigures, withoutJobs bool) ([]DeviceFigures, error) {
	devs, err := l.inv.Devices()
	if err != nil {
		return dst, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, dev := range devs {
		free, leased := l.figures(dev, withoutJobs)
		dst = append(dst, DeviceFigures{Index: dev.Index, Name: dev.Name, Total: dev.Total, Free: free, Leased: leased})
	}
	return dst, nil
}

// Rescale spreads total bytes over the devices of lease in proportion to
// what it holds on each (rounding down, remainder to the lowest indices):
// how a model's measured usage, which ProcessMemory sums over all devices,
// becomes a lease to Resize to. An empty lease gives nil.
func Rescale(lease map[int]uint64, total uint64) map[int]uint64 {
	var sum uint64
	for _, b := range lease {
		sum += b
	}
	if sum == 0 {
		return nil
	}
	devices := SortedDevices(lease)
	out := make(map[int]uint64, len(lease))
	var given uint64
	for _, d := range devices {
		// total×lease/sum without overflow: lease ≤ sum, so the quotient
		// is at most total and fits.
		hi, lo := bits.Mul64(total, lease[d])
		share, _ := bits.Div64(hi, lo, sum)
		out[d] = share
		given += share
	}
	for _, d := range devices { // fewer than len(devices) bytes are left
		if given == total {
			break
		}
		out[d]++
		given++
	}
	return out
}

func find(devs []Device, index int) (Device, bool) {
	for _, d := range devs {
		if d.Index == index {
			return d, true
		}
	}
	return Device{}, false
}

func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return ^uint64(0)
	}
	return s
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
