package main

import "unsafe"

// nameCache finds model indices by the address of a name's bytes before
// hashing it. In Go compiled to Wasm, under the host's per-call deadline,
// a map lookup by string costs about 1.4 µs, and a plan looks up the
// target and every running model; but the SDK interns the strings it
// decodes, so a model's name arrives at the same address on every call,
// and comparing an address and a length costs nothing.
//
// An entry holds the string it was made for, so its bytes stay allocated:
// another string at the same address with the same length is the same
// bytes (strings are immutable). A different string with the same content
// at another address misses and takes the map.
type nameCache struct {
	slots [256]nameSlot
}

type nameSlot struct {
	name  string
	index int32 // model index, or unknownModel
}

// cached returns name's model index if it is in the cache; otherwise call
// fill. Small enough to inline.
func (c *nameCache) cached(name string) (int32, bool) {
	s := c.slot(name)
	if len(s.name) == len(name) && unsafe.StringData(s.name) == unsafe.StringData(name) && len(name) > 0 {
		return s.index, true
	}
	return 0, false
}

// fill looks name up in m and caches the answer.
func (c *nameCache) fill(m *matrix, name string) int32 {
	i := m.lookup(name)
	if len(name) > 0 { // the empty string has no address of its own
		s := c.slot(name)
		s.name, s.index = name, i
	}
	return i
}

// slot is where name is cached, chosen by the address of its bytes.
func (c *nameCache) slot(name string) *nameSlot {
	p := uint64(uintptr(unsafe.Pointer(unsafe.StringData(name))))
	return &c.slots[(p*0x9E3779B97F4A7C15)>>56]
}

// lookup returns name's model index, or unknownModel.
func (m *matrix) lookup(name string) int32 {
	if i, ok := m.index[name]; ok {
		return i
	}
	return unknownModel
}
