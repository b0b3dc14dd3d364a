package sdk

import "unsafe"

// Shortcuts for decoding in the guest. In Go compiled to Wasm under the
// host's per-call deadline, every function call and every taken jump
// (each loop iteration) leaves native code for a check in the host and
// comes back (docs/RATIONALE.md, "Per-call deadline mechanism"), so the
// cost of guest code is roughly the number of calls and iterations it
// makes. runtime.memequal compares one byte per iteration and a map lookup
// of a string hashes it a few bytes per iteration: these helpers compare
// and hash a word or 64 bytes at a time, in straight-line code.

// load64 reads the 8 bytes at p+i, little-endian (Wasm and every host the
// SDK runs on read unaligned words).
func load64(p unsafe.Pointer, i int) uint64 { return *(*uint64)(unsafe.Add(p, i)) }
func load32(p unsafe.Pointer, i int) uint32 { return *(*uint32)(unsafe.Add(p, i)) }
func load16(p unsafe.Pointer, i int) uint16 { return *(*uint16)(unsafe.Add(p, i)) }

// sameBytes reports whether a and b hold the same bytes: 64 bytes per
// iteration, then a word at a time, then one overlapping load for the
// tail.
func sameBytes(a, b []byte) bool {
	n := len(a)
	if n != len(b) {
		return false
	}
	if n == 0 {
		return true
	}
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	if pa == pb {
		return true
	}
	switch {
	case n < 2:
		return *(*byte)(pa) == *(*byte)(pb)
	case n < 4:
		return load16(pa, 0) == load16(pb, 0) && load16(pa, n-2) == load16(pb, n-2)
	case n < 8:
		return load32(pa, 0) == load32(pb, 0) && load32(pa, n-4) == load32(pb, n-4)
	}
	i := 0
	for ; i+64 <= n; i += 64 {
		// (^ and | bind alike in Go: every xor needs its parentheses.)
		if (load64(pa, i)^load64(pb, i))|(load64(pa, i+8)^load64(pb, i+8))|
			(load64(pa, i+16)^load64(pb, i+16))|(load64(pa, i+24)^load64(pb, i+24))|
			(load64(pa, i+32)^load64(pb, i+32))|(load64(pa, i+40)^load64(pb, i+40))|
			(load64(pa, i+48)^load64(pb, i+48))|(load64(pa, i+56)^load64(pb, i+56)) != 0 {
			return false
		}
	}
	for ; i+8 <= n; i += 8 {
		if load64(pa, i) != load64(pb, i) {
			return false
		}
	}
	return load64(pa, n-8) == load64(pb, n-8)
}

// stringBytes is s's bytes, not to be written.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// frontSlot picks p's slot in internFront from its length and its first
// and last words (overlapping for short strings).
func frontSlot(p []byte) int {
	n := len(p)
	ptr := unsafe.Pointer(unsafe.SliceData(p))
	var w uint64
	switch {
	case n == 0:
		return 0
	case n < 4:
		w = uint64(*(*byte)(ptr)) | uint64(*(*byte)(unsafe.Add(ptr, n-1)))<<8 | uint64(*(*byte)(unsafe.Add(ptr, n/2)))<<16
	case n < 8:
		w = uint64(load32(ptr, 0)) | uint64(load32(ptr, n-4))<<32
	default:
		w = load64(ptr, 0) ^ (load64(ptr, n-8) * 0xff51afd7ed558ccd)
	}
	w ^= uint64(n)
	return int((w * 0x9e3779b97f4a7c15) >> (64 - internFrontBits))
}

const internFrontBits = 8

// internFront caches recently interned strings by frontSlot: a hit costs a
// hash of two words and one sameBytes, no map lookup.
var internFront [1 << internFrontBits]string

// tailStrs is a string list that ends a message (a plan request's running
// set), kept with its encoding: decoding the same list again — the common
// case, a scheduler plans on every request and the running set changes
// only with a swap — costs one sameBytes over its encoding. A hit hands out
// a copy in out, and a miss drops out, so a list handed out only ever
// holds one running set: a policy that kept an earlier list keeps what it
// got.
type tailStrs struct {
	raw  []byte
	list []string // the list raw encodes; never handed out
	out  []string // the copy handed out since the last miss
}

// decode decodes the string list that runs from d.off to the end of the
// message.
func (c *tailStrs) decode(d *decoder) []string {
	rest := d.b[d.off:]
	if len(c.raw) > 0 && sameBytes(rest, c.raw) {
		d.off = len(d.b)
		if c.list == nil {
			return nil
		}
		if c.out == nil {
			c.out = make([]string, len(c.list))
		}
		copy(c.out, c.list) // again: the event is what the host sent, even if a policy wrote to it
		return c.out
	}
	l := d.strs()
	c.raw, c.list, c.out = c.raw[:0], c.list[:0], nil
	if d.err == nil && d.short == 0 && d.off == len(d.b) {
		c.raw = append(c.raw, rest...)
		if l != nil {
			c.list = append(c.list, l...)
		} else {
			c.list = nil
		}
	}
	return l
}

// handOut returns a list equal to cur that the SDK never writes again:
// *last when it is equal (nil for an empty cur), else a copy, kept in
// *last.
func handOut[T comparable](last *[]T, cur []T) []T {
	if len(cur) == 0 {
		return nil
	}
	if len(*last) != len(cur) {
		*last = append([]T(nil), cur...)
		return *last
	}
	for i, v := range cur {
		if (*last)[i] != v {
			*last = append([]T(nil), cur...)
			break
		}
	}
	return *last
}
