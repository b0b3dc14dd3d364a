package sdk

import (
	"encoding/binary"
	"strconv"

	"github.com/loadout-dev/loadout/sdk/wire"
)

// SnapshotDelta is the reply of the optional snapshot_delta import
// (docs/ABI.md, "Snapshot deltas"): the models that changed since the
// snapshot a guest already holds, generation Base, or the whole snapshot
// when Base is 0. The Go SDK's Wasm glue applies it to the storage a policy
// keeps (ReadSnapshot, ReadSnapshotChanges); a policy never sees it. It is
// exported for hosts, which encode it with package wire.
type SnapshotDelta struct {
	Now int64
	// Base is the generation the delta applies to, as the guest passed it;
	// 0 when it carries the whole snapshot (Changed is then every position,
	// 0 to Total-1).
	Base uint64
	// Gen is the generation the guest holds once it has applied the delta:
	// the base of its next snapshot_delta call.
	Gen uint64
	// Total is the number of models in the snapshot once applied: models
	// past it are dropped (a reload removed them), and positions from the
	// guest's old length up to it are all in Changed (a reload added them).
	Total uint32
	// Changed are the positions, ascending, of the models that differ from
	// generation Base, and Models their values (the same length).
	Changed []uint32
	Models  []ModelInfo
	// GPUsChanged says that GPUs holds every GPU; when false, the GPUs are
	// those of generation Base and GPUs is empty.
	GPUsChanged bool
	GPUs        []GPUInfo
	// Host is the host memory, sent whole in every delta (ABI version 3;
	// not encoded for version 2).
	Host HostMemoryInfo
}

func (m *SnapshotDelta) kind() wire.Kind { return wire.MsgSnapshotDelta }

// The encoding: now i64 | base u64 | gen u64 | total u32 | changed u32
// count, then per model: position u32, ModelInfo | gpus_changed bool | the
// GPU list as in a Snapshot (present only when gpus_changed) | (version
// 3) host_total u64 | host_leased u64.
func (m *SnapshotDelta) encode(e *encoder) {
	e.i64(m.Now)
	e.u64(m.Base)
	e.u64(m.Gen)
	e.u32(m.Total)
	e.u32(uint32(len(m.Changed)))
	for i, pos := range m.Changed {
		e.u32(pos)
		m.Models[i].encode(e)
	}
	e.boolean(m.GPUsChanged)
	if m.GPUsChanged {
		encodeGPUs(e, m.GPUs)
	}
	encodeHost(e, m.Host)
}

func (m *SnapshotDelta) decode(d *decoder) {
	m.Now = d.i64()
	m.Base = d.u64()
	m.Gen = d.u64()
	m.Total = d.u32()
	n := d.count(4+modelInfoMinSize, "changed model list")
	m.Changed, m.Models = nil, nil
	if n > 0 {
		m.Changed, m.Models = make([]uint32, n), make([]ModelInfo, n)
	}
	for i := range n {
		m.Changed[i] = d.u32()
		m.Models[i].decode(d)
	}
	m.GPUsChanged = d.boolean()
	m.GPUs = nil
	if m.GPUsChanged {
		m.GPUs = decodeGPUs(d, nil)
	}
	m.Host = decodeHost(d)
}

func encodeGPUs(e *encoder, l []GPUInfo) {
	e.u32(uint32(len(l)))
	for _, g := range l {
		e.i32(g.Index)
		e.str(g.Name)
		e.u64(g.Total)
		e.u64(g.Free)
		e.u64(g.Leased)
	}
}

// decodeGPUs decodes a GPU list into reuse's storage when large enough.
func decodeGPUs(d *decoder, reuse []GPUInfo) []GPUInfo {
	n := d.count(4+4+8+8+8, "gpu list")
	if n == 0 {
		return nil
	}
	l := grow(reuse, n)
	for i := range l {
		g := &l[i]
		g.Index = d.i32()
		g.Name = d.str()
		g.Total = d.u64()
		g.Free = d.u64()
		g.Leased = d.u64()
	}
	return l
}

// deltaSink decodes a SnapshotDelta message straight into the snapshot a
// guest keeps (dst), instead of into a SnapshotDelta: the models it does
// not carry keep their values, and those it carries are decoded into their
// entries' storage. It is a message so that decodeMessage checks the
// header, truncation and trailing bytes as for every other.
type deltaSink struct {
	dst     *Snapshot
	base    uint64 // the generation dst holds, as the guest asked (0: none)
	gen     uint64 // out: the reply's generation
	all     bool   // out: the reply carried the whole snapshot
	changed []int  // out: positions decoded, appended
}

func (s *deltaSink) kind() wire.Kind { return wire.MsgSnapshotDelta }
func (s *deltaSink) encode(*encoder) { panic("sdk: deltaSink is decoded only") }

func (s *deltaSink) decode(d *decoder) {
	dst := s.dst
	// now i64 | base u64 | gen u64 | total u32: one block (see ModelInfo.decode)
	b := d.block(28)
	now := int64(binary.LittleEndian.Uint64(b[0:8]))
	base := binary.LittleEndian.Uint64(b[8:16])
	s.gen = binary.LittleEndian.Uint64(b[16:24])
	total := int(binary.LittleEndian.Uint32(b[24:28]))
	n := d.count(4+modelInfoMinSize, "changed model list")
	if d.err != nil || d.short != 0 {
		return
	}
	s.all = base == 0
	if base != 0 && base != s.base {
		d.err = wire.Malformed("a snapshot delta against generation " + strconv.FormatUint(base, 10) + ", but generation " + strconv.FormatUint(s.base, 10) + " is held")
		return
	}
	if total > maxDecodedElements || n > total || (s.all && n != total) {
		d.err = wire.Malformed("a snapshot delta of " + strconv.Itoa(n) + " models out of " + strconv.Itoa(total))
		return
	}
	old := len(dst.Models)
	if s.all {
		old = 0
	}
	if total > old+n { // the new positions must all be carried: checked before growing
		d.err = wire.Malformed("a snapshot delta that grows " + strconv.Itoa(old) + " models to " + strconv.Itoa(total) + " carries " + strconv.Itoa(n))
		return
	}
	if cap(dst.Models) < total {
		l := make([]ModelInfo, total)
		copy(l, dst.Models[:min(old, total)])
		dst.Models = l
	}
	dst.Models = dst.Models[:total]
	// Every position the guest did not hold must be carried: count them.
	fresh, prev := 0, -1
	for range n {
		pos := int(d.u32())
		if pos <= prev || pos >= total {
			if d.err == nil {
				d.err = wire.Malformed("snapshot delta position " + strconv.Itoa(pos) + " after " + strconv.Itoa(prev) + ", of " + strconv.Itoa(total) + " models")
			}
			return
		}
		prev = pos
		if pos >= old {
			fresh++
		}
		dst.Models[pos].decode(d)
		s.changed = append(s.changed, pos)
	}
	if fresh != max(total-old, 0) {
		d.err = wire.Malformed("a snapshot delta that grows " + strconv.Itoa(old) + " models to " + strconv.Itoa(total) + " carries " + strconv.Itoa(fresh) + " of the new ones")
		return
	}
	if total == 0 {
		dst.Models = nil
	}
	if d.boolean() {
		dst.GPUs = decodeGPUs(d, dst.GPUs)
	} else if s.all {
		d.err = wire.Malformed("a whole snapshot without its GPUs")
		return
	}
	dst.Host = decodeHost(d)
	dst.Now = now
}

// deltaReader is a guest's side of the snapshot_delta import: which
// storage holds the snapshot it last applied a reply to, and that reply's
// generation. Package-level in the guest (one per module instance).
type deltaReader struct {
	gen    uint64
	dst    *Snapshot
	models *ModelInfo // &dst.Models[0] as the last apply left it; nil if empty
	n      int        // len(dst.Models) then
	gpus   *GPUInfo
	ngpus  int
	sink   deltaSink
}

func firstOf[T any](l []T) *T {
	if len(l) == 0 {
		return nil
	}
	return &l[0]
}

// base is the generation to ask for a delta against: the last reply's,
// when dst is the storage it was applied to and still holds the lists it
// left; 0 (a whole snapshot) otherwise, e.g. after the policy replaced
// *dst or read into other storage.
func (r *deltaReader) base(dst *Snapshot) uint64 {
	if r.dst != dst || r.gen == 0 || firstOf(dst.Models) != r.models || len(dst.Models) != r.n ||
		firstOf(dst.GPUs) != r.gpus || len(dst.GPUs) != r.ngpus {
		return 0
	}
	return r.gen
}

// apply decodes reply, a SnapshotDelta message against base, into dst and
// appends to changed the positions it wrote. all reports a whole snapshot.
// After an error dst holds a mix and is forgotten: the next base is 0.
func (r *deltaReader) apply(reply []byte, dst *Snapshot, base uint64, changed []int) ([]int, bool, error) {
	s := &r.sink
	*s = deltaSink{dst: dst, base: base, changed: changed}
	err := decodeMessage(reply, s)
	changed, all, gen := s.changed, s.all, s.gen
	*s = deltaSink{}
	if err != nil {
		r.forget()
		return changed, true, err
	}
	r.gen, r.dst = gen, dst
	r.models, r.n = firstOf(dst.Models), len(dst.Models)
	r.gpus, r.ngpus = firstOf(dst.GPUs), len(dst.GPUs)
	return changed, all, nil
}

// forget drops the tracked snapshot: the next read is whole.
func (r *deltaReader) forget() { *r = deltaReader{} }
