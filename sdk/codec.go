package sdk

import (
	"encoding/binary"
	"slices"
	"strconv"
	"unsafe"

	"github.com/loadout-dev/loadout/sdk/internal/bytewise"
	"github.com/loadout-dev/loadout/sdk/wire"
)

// The wire encoding, described in package wire (sdk/wire), which hands
// this codec to hosts; the guest glue (abi_wasm.go) uses it directly. The
// codec speaks every version from wire.MinVersion to ABIVersion: the
// version is a field of the encoder and the decoder, and the few fields a
// later version added are written and read only under it. The guest speaks
// ABIVersion alone; the host picks its module's version
// (wire.AppendVersion, wire.DecodeVersion).

const maxDecodedElements = 1 << 20

// message is implemented by every type that crosses the ABI. Its methods
// are unexported: only this package defines messages.
type message interface {
	kind() wire.Kind
	encode(e *encoder)
	decode(d *decoder)
}

func init() {
	wire.Register(ABIVersion,
		func(dst []byte, v uint8, m any) ([]byte, bool) {
			msg, ok := m.(message)
			if !ok {
				return dst, false
			}
			return appendVersion(dst, v, msg), true
		},
		func(src []byte, v uint8, m any) (bool, error) {
			msg, ok := m.(message)
			if !ok {
				return false, nil
			}
			return true, decodeVersion(src, v, msg)
		})
}

// appendMessage appends m's encoding at ABIVersion (header and fields) to
// dst and returns the extended slice: the guest's encoding.
func appendMessage(dst []byte, m message) []byte { return appendVersion(dst, ABIVersion, m) }

// appendVersion appends m's encoding at version v, which must be one the
// codec speaks (wire.AppendVersion checks), to dst.
func appendVersion(dst []byte, v uint8, m message) []byte {
	var e *encoder
	if internStrings {
		e = &guestEncoder // the guest is single-threaded; see guestDecoder
	} else {
		e = &encoder{} // allocated only here, as in decodeMessage
	}
	e.v = v
	e.b = append(dst, v, byte(m.kind()))
	m.encode(e)
	b := e.b
	e.b = nil
	return b
}

// decodeMessage decodes src, which must hold exactly one message of m's
// kind at ABIVersion, into m: the guest's decoding. Errors wrap
// wire.ErrMalformed and say what is wrong and where.
func decodeMessage(src []byte, m message) error { return decodeVersion(src, ABIVersion, m) }

// decodeVersion decodes src, which must hold exactly one message of m's
// kind at version v, into m. A message of any other version is refused by
// its header, before a field is read: a field list is read only at the
// version that wrote it.
func decodeVersion(src []byte, v uint8, m message) error {
	if len(src) < wire.HeaderSize || src[0] != v || wire.Kind(src[1]) != m.kind() {
		return headerError(src, v, m)
	}
	var d *decoder
	if internStrings {
		d = &guestDecoder // its short and err are zero between messages
	} else {
		d = &decoder{} // allocated only here: a Go guest pays ~1.3 µs for one
	}
	d.b, d.off, d.v = src, wire.HeaderSize, v
	m.decode(d)
	if d.err != nil || d.short != 0 || d.off != len(d.b) {
		return d.fail(m, len(src))
	}
	d.b = nil
	return nil
}

// headerError says what is wrong with src's header, for a decoder of
// version v.
func headerError(src []byte, v uint8, m message) error {
	switch {
	case len(src) < wire.HeaderSize:
		return wire.Malformed(strconv.Itoa(len(src)) + " bytes, want at least a " + strconv.Itoa(wire.HeaderSize) + "-byte header")
	case src[0] != v:
		return wire.Malformed("ABI version " + strconv.Itoa(int(src[0])) + ", want " + strconv.Itoa(int(v)) + " (kind " + strconv.Itoa(int(src[1])) + ")")
	}
	return wire.Malformed("kind " + strconv.Itoa(int(src[1])) + ", want " + strconv.Itoa(int(m.kind())))
}

// fail is decodeMessage's error for a message d did not decode cleanly
// (n bytes of kind m): the first error, a read past the end, or trailing
// bytes. It resets d.
func (d *decoder) fail(m message, n int) error {
	err := d.err
	switch {
	case d.short != 0:
		err = wire.Malformed("kind " + strconv.Itoa(int(m.kind())) + " truncated: a field at offset " + strconv.Itoa(d.short-1) + " runs past the end (" + strconv.Itoa(n) + " bytes)")
	case err == nil:
		err = wire.Malformed(strconv.Itoa(len(d.b)-d.off) + " trailing bytes after kind " + strconv.Itoa(int(m.kind())))
	}
	*d = decoder{}
	return err
}

// v3 is the first version with residency (sdk.ModelInfo's sleep fields,
// Snapshot.Host) and eviction modes (Plan, SwapRequest, SwapStartEvent).
const v3 = 3

// guestDecoder and guestEncoder are reused by the single-threaded guest:
// passed through the Message interface, a local decoder escapes to the heap,
// and each allocation costs about 1.3 µs in Wasm. The host (internStrings
// off) allocates one per call, which costs it nothing that matters.
var (
	guestDecoder decoder
	guestEncoder encoder
)

// encoder appends fields to b for ABI version v.
type encoder struct {
	b []byte
	v uint8
}

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) i32(v int32)  { e.u32(uint32(v)) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) i64(v int64)  { e.u64(uint64(v)) }
func (e *encoder) boolean(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}
func (e *encoder) str(s string)   { e.u32(uint32(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bytes(p []byte) { e.u32(uint32(len(p))); e.b = append(e.b, p...) }

// strs and i32s size the list first and then store into it: one append
// per item would check the capacity each time, and in Go compiled to Wasm
// each of those jumps can cost an exit under the deadline (guestdecode.go).
func (e *encoder) strs(l []string) {
	if len(l) == 0 {
		e.u32(0)
		return
	}
	n := 4
	for i := range l {
		n += 4 + len(l[i])
	}
	b, off := e.reserve(n)
	binary.LittleEndian.PutUint32(b[off:], uint32(len(l)))
	off += 4
	for _, s := range l {
		binary.LittleEndian.PutUint32(b[off:], uint32(len(s)))
		off += 4 + copy(b[off+4:], s)
	}
}
func (e *encoder) i32s(l []int32) {
	if len(l) == 0 {
		e.u32(0)
		return
	}
	b, off := e.reserve(4 + 4*len(l))
	binary.LittleEndian.PutUint32(b[off:], uint32(len(l)))
	for i, v := range l {
		binary.LittleEndian.PutUint32(b[off+4+4*i:], uint32(v))
	}
}

// reserve extends e.b by n bytes and returns it with the offset of the
// first of them.
func (e *encoder) reserve(n int) ([]byte, int) {
	off := len(e.b)
	if cap(e.b)-off < n {
		e.b = slices.Grow(e.b, n)
	}
	e.b = e.b[:off+n]
	return e.b, off
}
func (e *encoder) u64s(l []uint64) {
	e.u32(uint32(len(l)))
	for _, v := range l {
		e.u64(v)
	}
}

// modes writes an eviction-mode list (version 3): a u32 count, then one
// byte per mode.
func (e *encoder) modes(l []EvictMode) {
	b, off := e.reserve(4 + len(l))
	binary.LittleEndian.PutUint32(b[off:], uint32(len(l)))
	for i, m := range l {
		b[off+4+i] = byte(m)
	}
}

// decoder reads fields. The reads are written to inline (no call on their
// path, within the compiler's budget): in Go compiled to Wasm a call that is
// not inlined costs tens of nanoseconds, and a message has dozens of
// fields. A read past the end records where it happened in short and makes
// every later read return zero; decodeMessage turns that into the error.
type decoder struct {
	b     []byte
	off   int
	short int // 1 + the offset of the first read past the end; 0 if none
	err   error
	v     uint8 // the ABI version being read (the header's)
}

func (d *decoder) u8() uint8 {
	if o := d.off; o < len(d.b) {
		d.off = o + 1
		return d.b[o]
	}
	d.ranOut()
	return 0
}

func (d *decoder) u32() uint32 {
	if o := d.off; o+4 <= len(d.b) {
		d.off = o + 4
		return binary.LittleEndian.Uint32(d.b[o:])
	}
	d.ranOut()
	return 0
}

func (d *decoder) i32() int32 { return int32(d.u32()) }

func (d *decoder) u64() uint64 {
	if o := d.off; o+8 <= len(d.b) {
		d.off = o + 8
		return binary.LittleEndian.Uint64(d.b[o:])
	}
	d.ranOut()
	return 0
}

func (d *decoder) i64() int64 { return int64(d.u64()) }

// ranOut records a read past the end. Small enough to inline itself.
func (d *decoder) ranOut() {
	if d.short == 0 {
		d.short = d.off + 1
	}
	d.off = len(d.b)
}

// block returns the next n bytes, or n zero bytes (and the decoder ran
// out, as for any read past the end) when fewer are left: fixed-width
// fields read from it need no check of their own.
func (d *decoder) block(n int) []byte {
	if o := d.off; n <= len(d.b)-o {
		d.off = o + n
		return d.b[o : o+n : o+n]
	}
	d.ranOut()
	return zeros[:n:n]
}

var zeros [64]byte

// bool8 is a bool field's value v, read at offset off: an error unless it
// is 0 or 1.
func (d *decoder) bool8(v byte, off int) bool {
	if v > 1 {
		d.notBool(off)
	}
	return v == 1
}

func (d *decoder) notBool(off int) {
	if d.err == nil {
		d.err = wire.Malformed("bool at offset " + strconv.Itoa(off) + " is neither 0 nor 1")
	}
}

func (d *decoder) boolean() bool {
	switch d.u8() {
	case 0:
		return false
	case 1:
		return true
	default:
		if d.err == nil {
			d.err = wire.Malformed("bool at offset " + strconv.Itoa(d.off-1) + " is neither 0 nor 1")
		}
		return false
	}
}

func (d *decoder) raw() []byte {
	n := int(d.u32())
	if o := d.off; n <= len(d.b)-o {
		d.off = o + n
		return d.b[o : o+n]
	}
	d.ranOut()
	return nil
}

func (d *decoder) str() string {
	p := d.raw()
	if internStrings {
		return intern(p)
	}
	return string(p)
}

// String interning, for the guest only. In Go compiled to Wasm every
// allocation costs about 1.3 µs (docs/RATIONALE.md), and decoded strings
// are almost always one of a few model names, so the guest glue turns
// internStrings on and repeated strings cost a map lookup (which does not
// allocate). The host leaves it off: it decodes from several goroutines.
var (
	internStrings bool
	internTable   map[string]string
)

// maxInterned bounds the table, so unbounded strings (client ids) cannot
// grow it without limit; past it strings are allocated as usual.
const maxInterned = 4096

func intern(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	slot := &internFront[frontSlot(p)]
	if s := *slot; len(s) == len(p) && bytewise.Same(unsafe.Pointer(unsafe.StringData(s)), unsafe.Pointer(unsafe.SliceData(p)), len(p)) {
		return s
	}
	s, ok := internTable[string(p)]
	if !ok {
		s = string(p)
		if len(internTable) < maxInterned {
			internTable[s] = s
		}
	}
	*slot = s
	return s
}

func (d *decoder) bytes() []byte {
	p := d.raw()
	if p == nil {
		return nil
	}
	return append([]byte(nil), p...)
}

// count reads a list length and checks that count items of at least
// minItem bytes each can still follow, so garbage cannot make us allocate.
func (d *decoder) count(minItem int, what string) int {
	n := d.u32()
	if d.err != nil {
		return 0
	}
	if n == 0 {
		return 0
	}
	if n > maxDecodedElements || int(n)*minItem > len(d.b)-d.off {
		d.err = wire.Malformed(what + " count " + strconv.FormatUint(uint64(n), 10) + " at offset " + strconv.Itoa(d.off-4) + " exceeds the message")
		return 0
	}
	return int(n)
}

func (d *decoder) strs() []string {
	n := d.count(4, "string list")
	if n == 0 {
		return nil
	}
	l := make([]string, n)
	for i := range l {
		l[i] = d.str()
	}
	return l
}

// i32s decodes an int list into reuse's storage when it is large enough
// (nil: a new slice). An empty list is nil.
func (d *decoder) i32s(reuse []int32) []int32 {
	n := d.count(4, "int list")
	if n == 0 {
		return nil
	}
	l := grow(reuse, n)
	for i := range l {
		l[i] = d.i32()
	}
	return l
}

// u64s is i32s for a uint64 list.
func (d *decoder) u64s(reuse []uint64) []uint64 {
	n := d.count(8, "uint64 list")
	if n == 0 {
		return nil
	}
	l := grow(reuse, n)
	for i := range l {
		l[i] = d.u64()
	}
	return l
}

// modes decodes an eviction-mode list (version 3); an empty one is nil.
// A mode past EvictSleep2 is an error: no version defines it.
func (d *decoder) modes() []EvictMode {
	n := d.count(1, "eviction mode list")
	if n == 0 {
		return nil
	}
	l := make([]EvictMode, n)
	start := d.off
	for i := range l {
		l[i] = EvictMode(d.u8())
		if l[i] > EvictSleep2 && d.err == nil {
			d.err = wire.Malformed("eviction mode " + strconv.Itoa(int(l[i])) + " at offset " + strconv.Itoa(start+i) + " (want 0 to " + strconv.Itoa(int(EvictSleep2)) + ")")
		}
	}
	return l
}

// grow returns s resized to n elements, reusing its storage when its
// capacity allows (the elements keep their old values until overwritten)
// and allocating otherwise.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

func (m *InitEvent) kind() wire.Kind       { return wire.MsgInit }
func (m *InitEvent) encode(e *encoder)     { e.i64(m.Now); e.bytes(m.Settings) }
func (m *InitEvent) decode(d *decoder)     { m.Now = d.i64(); m.Settings = d.bytes() }
func (m *RequestEvent) kind() wire.Kind    { return wire.MsgRequest }
func (m *SwapDoneEvent) kind() wire.Kind   { return wire.MsgSwapDone }
func (m *ServeDoneEvent) kind() wire.Kind  { return wire.MsgServeDone }
func (m *CancelEvent) kind() wire.Kind     { return wire.MsgCancel }
func (m *UnloadEvent) kind() wire.Kind     { return wire.MsgUnload }
func (m *TickEvent) kind() wire.Kind       { return wire.MsgTick }
func (m *ShutdownEvent) kind() wire.Kind   { return wire.MsgShutdown }
func (m *PlanRequest) kind() wire.Kind     { return wire.MsgPlanRequest }
func (m *Plan) kind() wire.Kind            { return wire.MsgPlan }
func (m *SwapStartEvent) kind() wire.Kind  { return wire.MsgSwapStart }
func (m *SwapRequest) kind() wire.Kind     { return wire.MsgSwapRequest }
func (m *ModelInfo) kind() wire.Kind       { return wire.MsgModelInfo }
func (m *ModelList) kind() wire.Kind       { return wire.MsgModelList }
func (m *Snapshot) kind() wire.Kind        { return wire.MsgSnapshot }
func (m *StopRequest) kind() wire.Kind     { return wire.MsgStopRequest }
func (m *JobPlanRequest) kind() wire.Kind  { return wire.MsgJobPlanRequest }
func (m *ShutdownEvent) encode(e *encoder) { e.i64(m.Now); e.str(m.Reason) }
func (m *ShutdownEvent) decode(d *decoder) { m.Now = d.i64(); m.Reason = d.str() }

func (m *RequestEvent) encode(e *encoder) {
	e.i64(m.Now)
	e.u64(uint64(m.ID))
	e.str(m.Model)
	e.i32(m.Priority)
	e.str(m.Client)
}

func (m *RequestEvent) decode(d *decoder) {
	m.Now = d.i64()
	m.ID = RequestID(d.u64())
	m.Model = d.str()
	m.Priority = d.i32()
	m.Client = d.str()
}

func (m *SwapDoneEvent) encode(e *encoder) { e.i64(m.Now); e.str(m.Model); e.str(m.Err) }
func (m *SwapDoneEvent) decode(d *decoder) { m.Now = d.i64(); m.Model = d.str(); m.Err = d.str() }

func (m *ServeDoneEvent) encode(e *encoder) { e.i64(m.Now); e.u64(uint64(m.ID)); e.str(m.Model) }
func (m *ServeDoneEvent) decode(d *decoder) {
	m.Now = d.i64()
	m.ID = RequestID(d.u64())
	m.Model = d.str()
}

func (m *CancelEvent) encode(e *encoder) { e.i64(m.Now); e.u64(uint64(m.ID)); e.str(m.Model) }
func (m *CancelEvent) decode(d *decoder) {
	m.Now = d.i64()
	m.ID = RequestID(d.u64())
	m.Model = d.str()
}

func (m *UnloadEvent) encode(e *encoder) { e.i64(m.Now); e.strs(m.Models); e.u8(uint8(m.Reason)) }
func (m *UnloadEvent) decode(d *decoder) {
	m.Now = d.i64()
	m.Models = d.strs()
	m.Reason = UnloadReason(d.u8())
}

func (m *TickEvent) encode(e *encoder) { e.i64(m.Now); e.strs(m.Changed) }
func (m *TickEvent) decode(d *decoder) { m.Now = d.i64(); m.Changed = d.strs() }

func (m *PlanRequest) encode(e *encoder) { e.i64(m.Now); e.str(m.Target); e.strs(m.Running) }
func (m *PlanRequest) decode(d *decoder) {
	m.Now = d.i64()
	m.Target = d.str()
	if internStrings {
		m.Running = planRunning.decode(d)
	} else {
		m.Running = d.strs()
	}
}

// planRunning keeps the guest's last plan request's running set (the guest
// is single-threaded; see internStrings).
var planRunning tailStrs

func (m *JobPlanRequest) encode(e *encoder) {
	e.i64(m.Now)
	e.str(m.Job)
	e.u32(m.GPUs)
	e.i32(m.Priority)
	e.i32s(m.Candidates)
	e.strs(m.Running)
}

func (m *JobPlanRequest) decode(d *decoder) {
	m.Now = d.i64()
	m.Job = d.str()
	m.GPUs = d.u32()
	m.Priority = d.i32()
	m.Candidates = d.i32s(nil)
	m.Running = d.strs()
}

// Plan: evict []string | devices []i32 | (version 3) modes []u8.
func (m *Plan) encode(e *encoder) {
	e.strs(m.Evict)
	e.i32s(m.Devices)
	if e.v >= v3 {
		e.modes(m.Modes)
	}
}

func (m *Plan) decode(d *decoder) {
	m.Evict = d.strs()
	m.Devices = d.i32s(nil)
	m.Modes = nil
	if d.v >= v3 {
		m.Modes = d.modes()
	}
}

// SwapRequest: model | evict []string | devices []i32 | (version 3)
// modes []u8.
func (m *SwapRequest) encode(e *encoder) {
	e.str(m.Model)
	e.strs(m.Evict)
	e.i32s(m.Devices)
	if e.v >= v3 {
		e.modes(m.Modes)
	}
}

func (m *SwapRequest) decode(d *decoder) {
	m.Model = d.str()
	m.Evict = d.strs()
	m.Devices = d.i32s(nil)
	m.Modes = nil
	if d.v >= v3 {
		m.Modes = d.modes()
	}
}

func (m *SwapStartEvent) encode(e *encoder) {
	e.i64(m.Now)
	e.str(m.Target)
	e.strs(m.Running)
	e.strs(m.Evict)
	e.i32s(m.Devices)
	if e.v >= v3 {
		e.modes(m.Modes)
	}
}

func (m *SwapStartEvent) decode(d *decoder) {
	m.Now = d.i64()
	m.Target = d.str()
	if internStrings {
		m.Running = planRunning.decodeAt(d) // the running set of the swap's plan, as a rule
	} else {
		m.Running = d.strs()
	}
	m.Evict = d.strs()
	m.Devices = d.i32s(nil)
	m.Modes = nil
	if d.v >= v3 {
		m.Modes = d.modes()
	}
}

// StopRequest is the argument of the stop_processes import.
type StopRequest struct{ Models []string }

func (m *StopRequest) encode(e *encoder) { e.strs(m.Models) }
func (m *StopRequest) decode(d *decoder) { m.Models = d.strs() }

// ModelList is the reply of the running_models import.
type ModelList struct{ Models []ModelInfo }

func (m *ModelList) encode(e *encoder) { encodeModels(e, m.Models) }
func (m *ModelList) decode(d *decoder) { m.Models = decodeModels(d, m.Models) }

func (m *ModelInfo) encode(e *encoder) {
	e.str(m.Name)
	e.u8(uint8(m.State))
	e.u32(m.InFlight)
	e.u32(m.ConcurrencyLimit)
	e.i32(m.Priority)
	e.boolean(m.Pinned)
	e.str(m.Group)
	e.i64(m.LastUse)
	e.i64(m.TTL)
	e.u64(m.EstimatedVRAM)
	e.u64(m.MeasuredVRAM)
	if e.v < v3 && m.Asleep() {
		// Stopped to version 2, as before residency: the GPUs an asleep
		// model's server is bound to are version 3's to know.
		e.i32s(nil)
		e.u64s(nil)
	} else {
		e.i32s(m.Devices)
		e.u64s(m.Leased)
	}
	if e.v >= v3 {
		b, off := e.reserve(residencySize)
		b[off], b[off+1] = m.SleepLevel, m.CanSleep
		binary.LittleEndian.PutUint64(b[off+2:], uint64(m.LoadTime))
		binary.LittleEndian.PutUint64(b[off+10:], uint64(m.WakeTime1))
		binary.LittleEndian.PutUint64(b[off+18:], uint64(m.WakeTime2))
		binary.LittleEndian.PutUint64(b[off+26:], m.HostBytes1)
		binary.LittleEndian.PutUint64(b[off+34:], m.HostBytes2)
		binary.LittleEndian.PutUint64(b[off+42:], m.HostLeased)
	}
}

// residencySize is the size of ModelInfo's version 3 tail: sleep_level u8
// | can_sleep u8 | load_time i64 | wake_time1 i64 | wake_time2 i64 |
// host_bytes1 u64 | host_bytes2 u64 | host_leased u64.
const residencySize = 2 + 6*8

// decode reads the fixed-width fields between and after the strings from
// one bounds-checked block each (block): in Go compiled to Wasm every call
// of a field reader costs an exit from native code under the per-call
// deadline (guestdecode.go), and a plan decodes a ModelInfo every time.
// The encoding is the fields one by one, as encode writes them; version 3
// adds the residency tail, one more block, read under one check of the
// version that the guest (always version 3) never jumps over.
func (m *ModelInfo) decode(d *decoder) {
	m.Name = d.str()
	// state u8 | in_flight u32 | concurrency_limit u32 | priority i32 | pinned bool
	b := d.block(14)
	m.State = ModelState(b[0])
	m.InFlight = binary.LittleEndian.Uint32(b[1:5])
	m.ConcurrencyLimit = binary.LittleEndian.Uint32(b[5:9])
	m.Priority = int32(binary.LittleEndian.Uint32(b[9:13]))
	m.Pinned = d.bool8(b[13], d.off-1)
	m.Group = d.str()
	// last_use i64 | ttl i64 | estimated_vram u64 | measured_vram u64
	b = d.block(32)
	m.LastUse = int64(binary.LittleEndian.Uint64(b[0:8]))
	m.TTL = int64(binary.LittleEndian.Uint64(b[8:16]))
	m.EstimatedVRAM = binary.LittleEndian.Uint64(b[16:24])
	m.MeasuredVRAM = binary.LittleEndian.Uint64(b[24:32])
	m.Devices = d.i32s(m.Devices)
	m.Leased = d.u64s(m.Leased)
	if d.v >= v3 {
		b = d.block(residencySize)
		m.SleepLevel, m.CanSleep = b[0], b[1]
		if b[0] > 2 || b[1] > 3 {
			d.badResidency(m, d.off-residencySize)
		}
		m.LoadTime = int64(binary.LittleEndian.Uint64(b[2:10]))
		m.WakeTime1 = int64(binary.LittleEndian.Uint64(b[10:18]))
		m.WakeTime2 = int64(binary.LittleEndian.Uint64(b[18:26]))
		m.HostBytes1 = binary.LittleEndian.Uint64(b[26:34])
		m.HostBytes2 = binary.LittleEndian.Uint64(b[34:42])
		m.HostLeased = binary.LittleEndian.Uint64(b[42:50])
	} else {
		m.SleepLevel, m.CanSleep, m.LoadTime, m.WakeTime1, m.WakeTime2 = 0, 0, 0, 0, 0
		m.HostBytes1, m.HostBytes2, m.HostLeased = 0, 0, 0
	}
}

// badResidency records a sleep level past 2 or a can_sleep with bits
// other than 1 and 2, read at offset off: no version defines them.
func (d *decoder) badResidency(m *ModelInfo, off int) {
	if d.err == nil {
		d.err = wire.Malformed("model " + strconv.Quote(m.Name) + " at offset " + strconv.Itoa(off) + ": sleep level " + strconv.Itoa(int(m.SleepLevel)) + ", can_sleep " + strconv.Itoa(int(m.CanSleep)) + " (want at most 2 and 3)")
	}
}

// modelInfoMinSize is the encoded size of a version 2 ModelInfo with empty
// strings and lists (a version 3 one is residencySize longer): the bound a
// list count is checked against.
const modelInfoMinSize = 4 + 1 + 4 + 4 + 4 + 1 + 4 + 8 + 8 + 8 + 8 + 4 + 4

func encodeModels(e *encoder, l []ModelInfo) {
	e.u32(uint32(len(l)))
	for i := range l {
		l[i].encode(e)
	}
}

// decodeModels decodes a model list into reuse's storage when it is large
// enough, each model's Devices and Leased into theirs (ReadSnapshot); a
// nil reuse allocates, as for every other message.
func decodeModels(d *decoder, reuse []ModelInfo) []ModelInfo {
	n := d.count(modelInfoMinSize, "model list")
	if n == 0 {
		return nil
	}
	l := grow(reuse, n)
	for i := range l {
		l[i].decode(d)
	}
	return l
}

// Snapshot: now i64 | models | gpus | (version 3) host_total u64 |
// host_leased u64.
func (m *Snapshot) encode(e *encoder) {
	e.i64(m.Now)
	encodeModels(e, m.Models)
	encodeGPUs(e, m.GPUs)
	encodeHost(e, m.Host)
}

func (m *Snapshot) decode(d *decoder) {
	m.Now = d.i64()
	m.Models = decodeModels(d, m.Models)
	m.GPUs = decodeGPUs(d, m.GPUs)
	m.Host = decodeHost(d)
}

// encodeHost writes the host memory (version 3; nothing before).
func encodeHost(e *encoder, h HostMemoryInfo) {
	if e.v >= v3 {
		e.u64(h.Total)
		e.u64(h.Leased)
	}
}

// decodeHost reads the host memory (version 3; zero before).
func decodeHost(d *decoder) HostMemoryInfo {
	if d.v < v3 {
		return HostMemoryInfo{}
	}
	b := d.block(16)
	return HostMemoryInfo{Total: binary.LittleEndian.Uint64(b[0:8]), Leased: binary.LittleEndian.Uint64(b[8:16])}
}
