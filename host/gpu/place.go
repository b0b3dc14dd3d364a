package gpu

import (
	"slices"

	"github.com/loadout-dev/loadout/sdk/placement"
)

// DeviceFree is one device's free memory, the input of Place and Split.
type DeviceFree struct {
	Index int    // device index
	Free  uint64 // bytes a new lease could take (the ledger accounts them)
}

// Place decides where a model that needs need bytes goes, given the
// devices' free memory and a per-device safety margin in bytes (memory left
// free on every device the model uses, over and above its need). It returns
// bytes per device index, by sdk/placement's rule — the one every policy
// that places applies too: the single device with the most free memory if
// the model fits on it; otherwise a split over the fewest devices that hold
// it, most free first, divided in proportion to their free memory (Split);
// otherwise *DoesNotFitError (errors.Is ErrDoesNotFit), with the most that a
// split over every device could hold. Ties go to the device listed first,
// so pass devices in index order. A need of 0 places nothing (an empty map).
// It is PlaceUnder with no Constraint, spread.
func Place(need uint64, devices []DeviceFree, margin uint64) (map[int]uint64, error) {
	return PlaceUnder(need, devices, margin, Constraint{}, false)
}

// PlaceUnder is Place under a model's Constraint (its `gpus:` and
// `split:`) and the box's `placement:` (pack true: the fullest device the
// model fits on whole, best fit; false: the emptiest, spread): the rule
// sdk/placement.Placer.Place applies with c.Rule(margin, pack). The
// *DoesNotFitError then says how much the constraint allowed and names it.
func PlaceUnder(need uint64, devices []DeviceFree, margin uint64, c Constraint, pack bool) (map[int]uint64, error) {
	if need == 0 {
		return map[int]uint64{}, nil
	}
	devs := toPlacement(devices)
	var p placement.Placer
	chosen, ok := p.Place(nil, need, devs, margin, c.Rule(margin, pack))
	if !ok {
		return nil, c.doesNotFit(need, devs, margin)
	}
	on := make([]DeviceFree, 0, len(chosen))
	for _, d := range devices {
		if slices.Contains(chosen, int32(d.Index)) {
			on = append(on, d)
		}
	}
	return Split(need, on, margin)
}

// Split divides need bytes over all the given devices in proportion to
// their free memory beyond margin (sdk/placement.Split): every device keeps
// margin bytes and the same share of its free memory. It returns
// *DoesNotFitError when the devices cannot hold need bytes together. Use it
// to place a model on the devices a swapper chose.
func Split(need uint64, devices []DeviceFree, margin uint64) (map[int]uint64, error) {
	devs := toPlacement(devices)
	split, ok := placement.Split(need, devs, margin)
	if !ok {
		return nil, &DoesNotFitError{Need: need, Best: placement.Capacity(devs, margin)}
	}
	out := make(map[int]uint64, len(split))
	for d, b := range split {
		out[int(d)] = b
	}
	return out, nil
}

func toPlacement(devices []DeviceFree) []placement.Device {
	out := make([]placement.Device, len(devices))
	for i, d := range devices {
		out[i] = placement.Device{Index: int32(d.Index), Free: d.Free}
	}
	return out
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
