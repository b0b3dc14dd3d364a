package config

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/loadout-dev/loadout/sdk/placement"
)

// The box's `placement:` values.
const (
	// PlacementSpread puts a model on the device with the most free memory
	// that holds it: models spread over the GPUs (the default, and
	// Loadout's rule before placement: existed).
	PlacementSpread = "spread"
	// PlacementPack puts a model on the device with the least free memory
	// that still holds it (best fit), keeping the emptiest devices free for
	// the models that need them.
	PlacementPack = "pack"
)

// placePos is where a model's placement keys are, for errors found after
// parsing (CheckPlacement).
type placePos struct {
	gpus  *yaml.Node   // the gpus: value
	items []*yaml.Node // one per Model.GPUs entry
	split *yaml.Node   // the split: value
	vram  *yaml.Node   // the vram: value
}

// modelGPUs decodes a model's `gpus: [1, 2]`: a non-empty list of distinct
// device indices.
func (d *decoder) modelGPUs(m *Model, n *yaml.Node, path string) {
	m.placed.gpus = n
	items, ok := d.items(n, path)
	if !ok {
		return
	}
	if len(items) == 0 {
		d.errorf(n, path, "gpus: [] allows no device; list the device indices the model may use, or drop the key for every device")
		return
	}
	for i, it := range items {
		ip := index(path, i)
		g, ok := d.integer(it, ip, "a device index (0, 1, ...)")
		switch {
		case !ok:
			continue
		case g < 0:
			d.errorf(it, ip, "want a device index of 0 or more, got %d", g)
			continue
		case slices.Contains(m.GPUs, g):
			d.errorf(it, ip, "device %d is listed twice", g)
			continue
		}
		m.GPUs = append(m.GPUs, g)
		m.placed.items = append(m.placed.items, it)
	}
}

// modelSplit decodes a model's `split: never | auto | always`.
func (d *decoder) modelSplit(m *Model, n *yaml.Node, path string) {
	m.placed.split = n
	s, ok := d.str(n, path)
	if !ok {
		return
	}
	mode, err := placement.ParseSplitMode(s)
	if err != nil || s == "" {
		d.errorf(n, path, "want never, auto or always, got %s", describe(n))
		return
	}
	m.Split = mode
}

// modelPlacement checks what a model's placement keys say together,
// whatever the box: split: always over one listed device.
func (d *decoder) modelPlacement(m *Model, path string) {
	if m.Split == placement.SplitAlways && len(m.GPUs) == 1 {
		d.errorf(m.placed.split, join(path, "split"), "split: always needs at least two devices to split over, but gpus: lists one (%s)", d.posOf(m.placed.gpus))
	}
}

// boxPlacement decodes the top-level `placement: pack | spread`.
func (d *decoder) boxPlacement(cfg *Config, n *yaml.Node) {
	cfg.Placement = PlacementSpread
	if n == nil {
		return
	}
	s, ok := d.str(n, "placement")
	if !ok {
		return
	}
	switch s {
	case PlacementSpread, PlacementPack:
		cfg.Placement = s
	default:
		d.errorf(n, "placement", "want pack (the fullest device that holds a model) or spread (the emptiest), got %s", describe(n))
	}
}

// Constrained reports whether m has a placement constraint (gpus: or a
// split: other than auto).
func (m *Model) Constrained() bool { return len(m.GPUs) > 0 || m.Split != placement.SplitAuto }

// CheckPlacement checks the models' placement constraints against the
// devices of a box: totals are their memory in bytes, by device index,
// and margin the bytes kept free on each. It reports, at the key in the
// file, a gpus: index the box does not have, split: always with fewer
// than two devices to split over, and a model whose declared vram: its
// constraint can never hold: larger than every device it may use under
// split: never, larger than all of them together otherwise. A model with
// no constraint is left alone (a load that can never fit fails with a
// clear error when it is asked for; Parse warns of one, checkTotal), and
// so is one without vram: (its need is known only from the backend). It
// returns Errors, or nil. Parse runs it against the declared gpus: when
// the file declares some; serve against the devices it finds.
func (c *Config) CheckPlacement(totals []uint64, margin uint64) error {
	var errs Errors
	for _, id := range c.ModelIDs() {
		m := c.Models[id]
		if !m.Constrained() || m.ReplicaOf != "" { // a replica's constraint is its model's
			continue
		}
		errs = append(errs, m.checkPlacement(totals, margin)...)
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

func (m *Model) checkPlacement(totals []uint64, margin uint64) Errors {
	var errs Errors
	at := func(n *yaml.Node, key, format string, args ...any) {
		e := &Error{Pos: m.Pos, Key: join(join("models", m.ID), key), Message: fmt.Sprintf(format, args...)}
		if n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
		errs = append(errs, e)
	}
	devices := func() string {
		switch len(totals) {
		case 0:
			return "the box has no GPU"
		case 1:
			return "the box has 1 GPU (index 0)"
		}
		return fmt.Sprintf("the box has %d GPUs (indices 0 to %d)", len(totals), len(totals)-1)
	}
	allowed := m.GPUs
	if len(allowed) == 0 {
		for i := range totals {
			allowed = append(allowed, i)
		}
	}
	var usable []uint64 // by position in allowed
	for i, g := range m.GPUs {
		if g >= len(totals) {
			at(m.placed.items[i], "", "GPU %d does not exist: %s", g, devices())
			errs[len(errs)-1].Key = index(join(join("models", m.ID), "gpus"), i)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	for _, g := range allowed {
		usable = append(usable, totals[g]-min(totals[g], margin))
	}
	if m.Split == placement.SplitAlways && len(allowed) < 2 {
		at(m.placed.split, "split", "split: always needs at least two GPUs to split over: %s", devices())
		return errs
	}
	if len(allowed) == 0 {
		at(m.placed.split, "split", "split: %s: %s", m.Split, devices())
		return errs
	}
	need := uint64(max(m.VRAM, 0))
	if need == 0 {
		return errs
	}
	var sum, one uint64
	for _, u := range usable {
		sum += u
		one = max(one, u)
	}
	where := "the GPUs it may use"
	if len(m.GPUs) > 0 {
		where = fmt.Sprintf("gpus: %v", formatIndices(m.GPUs))
	}
	if e := m.checkReplicas(usable, need, where); e != nil && need <= sum && (m.Split != placement.SplitNever || need <= one) {
		errs = append(errs, e)
	}
	switch {
	case m.Split == placement.SplitNever && need > one:
		at(m.placed.split, "split", "split: never, but vram: %s is larger than every device of %s (the largest holds %s): it could never load",
			formatSize(int64(need)), where, formatSize(int64(one)))
	case need > sum:
		key, node := "gpus", m.placed.gpus
		if len(m.GPUs) == 0 {
			key, node = "split", m.placed.split
		}
		at(node, key, "vram: %s is larger than %s hold together (%s): it could never load", formatSize(int64(need)), where, formatSize(int64(sum)))
	}
	return errs
}

// checkTotal warns of a model without a placement constraint whose
// declared vram: is more than every device of the box holds together:
// split over all of them, the widest placement there is, it still could
// not load, and each request for it would fail. A warning, not an error:
// the rest of the box serves (a constrained model's impossible placement
// is an error, CheckPlacement).
func (d *decoder) checkTotal(m *Model, totals []uint64) {
	need := uint64(max(m.VRAM, 0))
	var sum uint64
	for _, t := range totals {
		sum += t
	}
	if m.Constrained() || m.ReplicaOf != "" || need == 0 || need <= sum {
		return
	}
	d.warnf(m.placed.vram, join(join("models", m.ID), "vram"),
		"%s is larger than every GPU of the box holds together (%s): it could never load, and every request for it fails", formatSize(int64(need)), formatSize(int64(sum)))
}

func formatIndices(ids []int) string {
	s := make([]string, len(ids))
	for i, g := range ids {
		s[i] = fmt.Sprint(g)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// declaredPlacement checks the constraints against the declared devices,
// when the file declares some (CheckPlacement).
func (d *decoder) declaredPlacement(cfg *Config) {
	if len(cfg.GPUs) == 0 {
		return
	}
	totals := make([]uint64, len(cfg.GPUs))
	for i, g := range cfg.GPUs {
		totals[i] = uint64(max(g.Memory, 0))
	}
	if errs, ok := cfg.CheckPlacement(totals, 0).(Errors); ok {
		d.errs = append(d.errs, errs...)
	}
	for _, id := range cfg.ModelIDs() {
		d.checkTotal(cfg.Models[id], totals)
	}
}
