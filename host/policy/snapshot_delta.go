package policy

import (
	"context"
	"slices"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
	"github.com/tetratelabs/wazero/api"
)

// sentSnapshot is the host's half of the snapshot_delta import for one
// instance: the snapshot it last wrote into the instance's memory, as
// generation gen, so that the next reply carries only what differs from
// it. It belongs to the instance: a re-instantiated policy (after a crash,
// a revival, a fallback's hand-over) starts with none, and so does its
// guest, whose first read is then whole.
type sentSnapshot struct {
	gen    uint64
	models []sdk.ModelInfo // deep copies: Devices and Leased are this struct's own
	gpus   []sdk.GPUInfo
	delta  sdk.SnapshotDelta // the reply being encoded, its lists reused
}

// diff makes s.delta the reply to a guest holding generation base of snap:
// every model when base is not s.gen (or 0), else those that differ from
// what was sent, by position, and the GPUs only if they differ.
func (s *sentSnapshot) diff(snap *sdk.Snapshot, base uint64) *sdk.SnapshotDelta {
	d := &s.delta
	whole := base == 0 || base != s.gen
	*d = sdk.SnapshotDelta{
		Now: snap.Now, Gen: s.gen + 1, Total: uint32(len(snap.Models)),
		Changed: d.Changed[:0], Models: d.Models[:0],
	}
	if !whole {
		d.Base = base
	}
	for i := range snap.Models {
		m := &snap.Models[i]
		if whole || i >= len(s.models) || !m.Equal(&s.models[i]) {
			d.Changed = append(d.Changed, uint32(i))
			d.Models = append(d.Models, *m)
		}
	}
	if whole || !slices.Equal(snap.GPUs, s.gpus) {
		d.GPUsChanged, d.GPUs = true, snap.GPUs
	}
	d.Host = snap.Host // sent whole every time (version 3; left out for 2)
	return d
}

// commit records that the reply s.delta, made from snap, was written.
func (s *sentSnapshot) commit(snap *sdk.Snapshot) {
	d := &s.delta
	s.gen = d.Gen
	if cap(s.models) < len(snap.Models) {
		s.models = slices.Grow(s.models[:len(s.models)], len(snap.Models)-len(s.models))
	}
	s.models = s.models[:len(snap.Models)]
	for _, pos := range d.Changed {
		keep := &s.models[pos]
		devices, leased := keep.Devices[:0], keep.Leased[:0]
		*keep = snap.Models[pos]
		keep.Devices = append(devices, snap.Models[pos].Devices...)
		keep.Leased = append(leased, snap.Models[pos].Leased...)
	}
	if d.GPUsChanged {
		s.gpus = append(s.gpus[:0], snap.GPUs...)
	}
	// Drop the references into snap: the reply is in guest memory now.
	clear(d.Models)
	d.GPUs = nil
}

// snapshot_delta(base i64, buf, limit) -> i32: a SnapshotDelta message,
// the models that changed since generation base of this instance's
// snapshot (base 0 or stale: all of them). The retry pattern as for every
// read; what was sent is recorded only when the reply is written, so a
// guest that retries with a larger buffer gets the same delta.
func importSnapshotDelta(ctx context.Context, mod api.Module, stack []uint64) {
	in := callerOf(ctx)
	if in == nil {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	buf, limit := uint32(stack[1]), uint32(stack[2])
	if !validBuf(mod, buf, limit) {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	sv := in.sv
	sdk.ReadSnapshot(sv.host, &sv.snap)
	sv.reply = wire.AppendVersion(sv.reply[:0], sv.ver, in.sent.diff(&sv.snap, stack[0]))
	if len(sv.reply) <= int(limit) {
		if !mod.Memory().Write(buf, sv.reply) {
			retErr(stack, sdk.ErrBadArgument)
			return
		}
		in.sent.commit(&sv.snap)
	}
	ret(stack, int32(len(sv.reply)))
}
