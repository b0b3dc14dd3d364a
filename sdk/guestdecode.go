package sdk

import (
	"unsafe"

	"github.com/loadout-dev/loadout/sdk/internal/bytewise"
)

// Shortcuts for decoding in the guest. In Go compiled to Wasm under the
// host's per-call deadline, every function call and every taken jump
// (each loop iteration) leaves native code for a check in the host and
// comes back (docs/RATIONALE.md, "Per-call deadline mechanism"), so the
// cost of guest code is roughly the number of calls and iterations it
// makes. runtime.memequal compares one byte per iteration and a map lookup
// of a string hashes it a few bytes per iteration: these helpers compare
// (package bytewise) and hash a word or 64 bytes at a time, in
// straight-line code.

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
		w = uint64(bytewise.Load32(ptr, 0)) | uint64(bytewise.Load32(ptr, n-4))<<32
	default:
		w = bytewise.Load64(ptr, 0) ^ (bytewise.Load64(ptr, n-8) * 0xff51afd7ed558ccd)
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
	raw   []byte
	list  []string // the list raw encodes; never handed out
	out   []string // the copy handed out since the last miss
	outAt []string // the copy decodeAt handed out since then
}

// decode decodes the string list that runs from d.off to the end of the
// message.
func (c *tailStrs) decode(d *decoder) []string {
	rest := d.b[d.off:]
	if len(c.raw) > 0 && bytewise.Equal(rest, c.raw) {
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
	c.raw, c.list, c.out, c.outAt = c.raw[:0], c.list[:0], nil, nil
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

// decodeAt decodes the string list at d.off, which more of the message
// may follow, as the list kept when its encoding is there: an encoding
// says where it ends, so bytes that start with the one kept hold that
// list. A swap's running set is the one its plan was asked with, in the
// same event. A miss decodes as strs does and keeps nothing.
func (c *tailStrs) decodeAt(d *decoder) []string {
	rest := d.b[d.off:]
	if n := len(c.raw); n > 0 && n <= len(rest) && bytewise.Equal(rest[:n], c.raw) {
		d.off += n
		if c.list == nil {
			return nil
		}
		if c.outAt == nil {
			c.outAt = make([]string, len(c.list))
		}
		copy(c.outAt, c.list) // as decode's copy
		return c.outAt
	}
	return d.strs()
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
