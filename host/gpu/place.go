package gpu

import (
	"maps"
	"math/bits"
	"slices"
)

// DeviceFree is one device's free memory, the input of Place and Split.
type DeviceFree struct {
	Index int    // device index
	Free  uint64 // bytes free (Ledger.Free gives them)
}

// Place decides where a model that needs need bytes goes, given the
// devices' free memory and a per-device safety margin in bytes (memory left
// free on every device the model uses, over and above its need). It returns
// bytes per device index:
//
//  1. The single device with the most free memory, if the model fits on it
//     (one device is fastest: no traffic between GPUs).
//  2. Otherwise a split (multi-GPU tensor split) over the fewest devices
//     that hold it, taken in order of free memory, with the model divided
//     among them in proportion to their free memory (Split), as llama.cpp's
//     --tensor-split and Ollama divide layers.
//  3. Otherwise *DoesNotFitError (errors.Is ErrDoesNotFit), with the most
//     that a split over every device could hold.
//
// It is deterministic: ties between devices with equal free memory go to
// the one listed first, so pass devices in index order. A need of 0 places
// nothing (an empty map). The swapper prioritylru applies the same rule;
// a change here must be made there too.
func Place(need uint64, devices []DeviceFree, margin uint64) (map[int]uint64, error) {
	if need == 0 {
		return map[int]uint64{}, nil
	}
	best := -1
	for i, d := range devices {
		if best < 0 || usable(d, margin) > usable(devices[best], margin) {
			best = i
		}
	}
	if best >= 0 && need <= usable(devices[best], margin) {
		return map[int]uint64{devices[best].Index: need}, nil
	}
	// The fewest devices: most free first, ties in the order given.
	order := slices.Clone(devices)
	slices.SortStableFunc(order, func(a, b DeviceFree) int {
		ua, ub := usable(a, margin), usable(b, margin)
		switch {
		case ua > ub:
			return -1
		case ua < ub:
			return 1
		}
		return 0
	})
	var sum uint64
	for k, d := range order {
		sum += usable(d, margin)
		if sum >= need {
			chosen := order[:k+1]
			// Split in the order given, so remainders land deterministically.
			slices.SortStableFunc(chosen, func(a, b DeviceFree) int { return position(devices, a.Index) - position(devices, b.Index) })
			return Split(need, chosen, margin)
		}
	}
	return nil, &DoesNotFitError{Need: need, Best: sum}
}

// Split divides need bytes over all the given devices in proportion to
// their free memory beyond margin (a device with none gets nothing), so
// every device keeps margin bytes and the same share of its free memory. It
// rounds down and gives the bytes left over to the devices in the order
// given. It returns *DoesNotFitError when the devices cannot hold need
// bytes together. Use it to place a model on the devices a swapper chose.
func Split(need uint64, devices []DeviceFree, margin uint64) (map[int]uint64, error) {
	var total uint64
	for _, d := range devices {
		total += usable(d, margin)
	}
	if need > total {
		return nil, &DoesNotFitError{Need: need, Best: total}
	}
	out := make(map[int]uint64, len(devices))
	if need == 0 {
		return out, nil
	}
	var given uint64
	for _, d := range devices {
		u := usable(d, margin)
		if u == 0 {
			continue
		}
		// need*u/total without overflow; the quotient is at most u.
		hi, lo := bits.Mul64(need, u)
		share, _ := bits.Div64(hi, lo, total)
		out[d.Index] = share
		given += share
	}
	for _, d := range devices {
		if given == need {
			break
		}
		if u := usable(d, margin); u > out[d.Index] {
			add := min(u-out[d.Index], need-given)
			out[d.Index] += add
			given += add
		}
	}
	maps.DeleteFunc(out, func(_ int, b uint64) bool { return b == 0 })
	return out, nil
}

// usable is a device's free memory beyond the margin, in bytes.
func usable(d DeviceFree, margin uint64) uint64 {
	if d.Free <= margin {
		return 0
	}
	return d.Free - margin
}

func position(devices []DeviceFree, index int) int {
	return slices.IndexFunc(devices, func(d DeviceFree) bool { return d.Index == index })
}

// SortedDevices returns the device indices of a placement (Place's or a
// lease's), sorted: the list to start the model server on.
func SortedDevices(placement map[int]uint64) []int {
	out := make([]int, 0, len(placement))
	for d := range placement {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}
