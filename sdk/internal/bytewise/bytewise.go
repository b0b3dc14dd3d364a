// Package bytewise compares memory a word or 64 bytes at a time, in
// straight-line code, for the SDK's guest glue and sdk/evict. In Go
// compiled to Wasm under the host's per-call deadline every loop iteration
// leaves native code for a check in the host (docs/RATIONALE.md,
// "Per-call deadline mechanism"), and runtime.memequal compares one byte
// per iteration.
package bytewise

import "unsafe"

// Load64 reads the 8 bytes at p+i, little-endian (Wasm and every host the
// SDK runs on read unaligned words).
func Load64(p unsafe.Pointer, i int) uint64 { return *(*uint64)(unsafe.Add(p, i)) }

// Load32 reads the 4 bytes at p+i, little-endian.
func Load32(p unsafe.Pointer, i int) uint32 { return *(*uint32)(unsafe.Add(p, i)) }

func load16(p unsafe.Pointer, i int) uint16 { return *(*uint16)(unsafe.Add(p, i)) }

// Equal reports whether a and b hold the same bytes: 64 bytes per
// iteration, and every length below 64 (and the tail past the last whole
// block) as two overlapping loads of the largest size that fits, so that
// only whole blocks loop.
func Equal(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	return Same(unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b)), len(a))
}

// Same is Equal for the n bytes at pa and pb: for callers that hold
// pointers (a string's data), since unsafe.Slice is a runtime call in Wasm.
func Same(pa, pb unsafe.Pointer, n int) bool {
	if n == 0 || pa == pb {
		return true
	}
	// Nested, not a chain of cases: every test that fails in a chain is a
	// jump, and in Wasm under the deadline a jump can cost an exit.
	if n < 16 {
		if n >= 8 {
			return (Load64(pa, 0)^Load64(pb, 0))|(Load64(pa, n-8)^Load64(pb, n-8)) == 0
		}
		if n >= 4 {
			return Load32(pa, 0) == Load32(pb, 0) && Load32(pa, n-4) == Load32(pb, n-4)
		}
		if n >= 2 {
			return load16(pa, 0) == load16(pb, 0) && load16(pa, n-2) == load16(pb, n-2)
		}
		return *(*byte)(pa) == *(*byte)(pb)
	}
	if n < 64 {
		if n < 32 {
			return block16(pa, pb, 0)|block16(pa, pb, n-16) == 0
		}
		return block32(pa, pb, 0)|block32(pa, pb, n-32) == 0
	}
	if n < 256 {
		for i := 0; i+64 <= n; i += 64 {
			if block32(pa, pb, i)|block32(pa, pb, i+32) != 0 {
				return false
			}
		}
		return block32(pa, pb, n-64)|block32(pa, pb, n-32) == 0
	}
	// Long runs (a running set's encoding, or its string headers, at 100
	// models: 0.7 and 1.6 KB): 256 bytes per iteration.
	for i := 0; i+256 <= n; i += 256 {
		if block128(pa, pb, i)|block128(pa, pb, i+128) != 0 {
			return false
		}
	}
	return block128(pa, pb, n-256)|block128(pa, pb, n-128) == 0
}

func block128(p, q unsafe.Pointer, i int) uint64 {
	return block32(p, q, i) | block32(p, q, i+32) | block32(p, q, i+64) | block32(p, q, i+96)
}

// block16 and block32 are zero when the 16 or 32 bytes at p+i and q+i are
// equal. (^ and | bind alike in Go: every xor needs its parentheses.)
func block16(p, q unsafe.Pointer, i int) uint64 {
	return (Load64(p, i) ^ Load64(q, i)) | (Load64(p, i+8) ^ Load64(q, i+8))
}

func block32(p, q unsafe.Pointer, i int) uint64 {
	return (Load64(p, i) ^ Load64(q, i)) | (Load64(p, i+8) ^ Load64(q, i+8)) |
		(Load64(p, i+16) ^ Load64(q, i+16)) | (Load64(p, i+24) ^ Load64(q, i+24))
}

// Strings reports whether a and b hold the same strings, comparing their
// headers (pointer and length) 64 bytes at a time: equal headers mean equal
// strings, and the guest interns decoded names, so equal names decoded from
// the host have equal headers. Different headers may still hold equal
// strings: false then only means "not known to be equal".
func Strings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	return Same(unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b)), len(a)*int(unsafe.Sizeof("")))
}

// SameString reports whether a and b are the same string by header: same
// data pointer and length (then they are equal; otherwise they may still
// be).
func SameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}
