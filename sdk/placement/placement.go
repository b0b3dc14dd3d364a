// Package placement decides which GPUs a model (or a job) goes on, as a
// chain of small named filters and sorters over devices, the way Seldon
// Core v2's scheduler places models. Its functions are pure and compile to
// wasip1, so the host's lease ledger (host/gpu) and every policy that places
// (policies/prioritylru) apply the same rule: a plan a swapper makes is the
// placement the host leases.
//
// The rule (Place, with a Rule; Choose is Place with filters only):
//
//  1. keep the devices every Filter accepts (Allowed: only the devices a
//     model may use, its `gpus:`);
//  2. unless the model must be split (SplitAlways), the single device the
//     Rule's Prefer sorter puts first among those the need fits on: by
//     default the one with the most usable memory (free beyond the
//     margin; MostFree, the box's `placement: spread`), or the one with
//     the least that still holds it (LeastFree, `placement: pack`), ties
//     to the one listed first. One device is fastest, with no traffic
//     between GPUs;
//  3. otherwise, unless the model may not be split (SplitNever), a split
//     over the fewest devices that hold the need, taken most usable first
//     (MostFree), as llama.cpp's --tensor-split divides layers; a model
//     that must be split (SplitAlways) goes on every device kept, as
//     tensor parallelism over all of them;
//  4. otherwise it does not fit.
//
// Split then divides the bytes over the chosen devices in proportion to
// their usable memory, so every device keeps its margin and the same share
// of what it has free.
package placement

import (
	"math/bits"
	"strconv"
)

// Device is one GPU as placement sees it: its index and the bytes a new
// lease could take on it now (the host's ledger gives them net of leases
// and of its own margin; a policy reads them from sdk.Snapshot's GPUs,
// crediting what its evictions give back).
type Device struct {
	Index int32
	Free  uint64 // bytes
}

// Usable is d's free memory beyond margin, in bytes (0 when the margin
// takes it all).
func Usable(d Device, margin uint64) uint64 {
	if d.Free <= margin {
		return 0
	}
	return d.Free - margin
}

// Filter says whether a device may be used.
type Filter func(Device) bool

// Allowed accepts only the devices listed (a model's `gpus:`); with none
// listed it accepts every device.
func Allowed(indices []int32) Filter {
	return func(d Device) bool {
		if len(indices) == 0 {
			return true
		}
		for _, i := range indices {
			if i == d.Index {
				return true
			}
		}
		return false
	}
}

// Sorter orders devices, like cmp.Compare: negative when a goes first.
type Sorter func(a, b Device) int

// MostFree orders devices by usable memory beyond margin, most first.
func MostFree(margin uint64) Sorter {
	return func(a, b Device) int {
		ua, ub := Usable(a, margin), Usable(b, margin)
		switch {
		case ua > ub:
			return -1
		case ua < ub:
			return 1
		}
		return 0
	}
}

// Placer chooses devices. Its scratch space is reused, so a Placer that has
// grown allocates nothing (policies run it on every plan); the zero value
// is ready. It is not safe for concurrent use.
type Placer struct {
	kept []Device
}

// Choose returns where need bytes go under the package's rule with the
// default Rule (prefer the most usable device, split when no single device
// holds the need) narrowed by filters: Place with Rule{Filters: filters}.
// The chosen devices' indices are appended to dst[:0], in the order
// devices lists them, with whether need fits. devices should be in index
// order (ties go to the first listed); margin is left free on every device
// used. A need of 0 fits on no device (dst[:0], true).
func (p *Placer) Choose(dst []int32, need uint64, devices []Device, margin uint64, filters ...Filter) ([]int32, bool) {
	return p.Place(dst, need, devices, margin, Rule{Filters: filters})
}

// Place returns where need bytes go under the package's rule narrowed and
// ordered by r: the chosen devices' indices appended to dst[:0], in the
// order devices lists them, and whether need fits. devices should be in
// index order (ties go to the first listed); margin is left free on every
// device used. A need of 0 fits on no device (dst[:0], true), whatever r
// says. A grown Placer allocates nothing here.
func (p *Placer) Place(dst []int32, need uint64, devices []Device, margin uint64, r Rule) ([]int32, bool) {
	dst = dst[:0]
	if need == 0 {
		return dst, true
	}
	p.kept = p.kept[:0]
next:
	for _, d := range devices {
		for _, f := range r.Filters {
			if !f(d) {
				continue next
			}
		}
		p.kept = append(p.kept, d)
	}
	if len(p.kept) == 0 {
		return dst, false
	}
	if r.Split == SplitAlways {
		// Every device kept, each with some memory to give: a split over
		// fewer is not what the model asked for.
		if len(p.kept) < 2 {
			return dst, false
		}
		var sum uint64
		for _, d := range p.kept {
			u := Usable(d, margin)
			if u == 0 {
				return dst, false
			}
			sum += u
		}
		if sum < need {
			return dst, false
		}
		for _, d := range p.kept {
			dst = append(dst, d.Index)
		}
		return dst, true
	}
	prefer := r.Prefer
	best := -1
	for i, d := range p.kept {
		if Usable(d, margin) < need {
			continue
		}
		if best < 0 || (prefer == nil && Usable(d, margin) > Usable(p.kept[best], margin)) ||
			(prefer != nil && prefer(d, p.kept[best]) < 0) {
			best = i
		}
	}
	if best >= 0 {
		return append(dst, p.kept[best].Index), true
	}
	if r.Split == SplitNever {
		return dst, false
	}
	// The fewest devices, most usable first: a stable insertion sort, which
	// allocates nothing for a handful of GPUs.
	for i := 1; i < len(p.kept); i++ {
		for j := i; j > 0 && Usable(p.kept[j], margin) > Usable(p.kept[j-1], margin); j-- {
			p.kept[j], p.kept[j-1] = p.kept[j-1], p.kept[j]
		}
	}
	var sum uint64
	for k, d := range p.kept {
		sum += Usable(d, margin)
		if sum < need {
			continue
		}
		for _, dev := range devices { // in the order given
			for _, c := range p.kept[:k+1] {
				if c.Index == dev.Index {
					dst = append(dst, dev.Index)
					break
				}
			}
		}
		return dst, true
	}
	return dst, false
}

// Capacity is the most bytes a split over every device could hold: the
// sum of their usable memory beyond margin.
func Capacity(devices []Device, margin uint64) uint64 {
	var total uint64
	for _, d := range devices {
		total += Usable(d, margin)
	}
	return total
}

// Split divides need bytes over all of devices in proportion to their
// usable memory beyond margin (a device with none gets nothing), rounding
// down and giving the bytes left over to the devices in the order given. It
// returns the bytes by device index, without devices that get none, and
// false (and nil) when the devices cannot hold need together. A need of 0
// gives an empty map.
func Split(need uint64, devices []Device, margin uint64) (map[int32]uint64, bool) {
	total := Capacity(devices, margin)
	if need > total {
		return nil, false
	}
	out := make(map[int32]uint64, len(devices))
	if need == 0 {
		return out, true
	}
	var given uint64
	for _, d := range devices {
		u := Usable(d, margin)
		if u == 0 {
			continue
		}
		// need*u/total without overflow; the quotient is at most u.
		hi, lo := bits.Mul64(need, u)
		share, _ := bits.Div64(hi, lo, total)
		if share > 0 {
			out[d.Index] = share
		}
		given += share
	}
	for _, d := range devices {
		if given == need {
			break
		}
		if u := Usable(d, margin); u > out[d.Index] {
			add := min(u-out[d.Index], need-given)
			out[d.Index] += add
			given += add
		}
	}
	return out, true
}

// FormatDevices writes GPU indices for logs and messages as fmt's %v
// writes a slice ("[0 2]", "[]" for none), without linking fmt into a
// guest.
func FormatDevices(devices []int32) string {
	b := []byte{'['}
	for i, d := range devices {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, int64(d), 10)
	}
	return string(append(b, ']'))
}
