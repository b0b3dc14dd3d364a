package router

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/loadout-dev/loadout/host/pagecache"
)

// A request held for a stopped model (here: waiting while another model
// of its exclusive group loads) has the model's weights read ahead into
// the page cache, leased against host memory until its load ends.
func TestReadAhead_HeldRequestWarmsWeightsUntilItsLoad(t *testing.T) {
	weights := filepath.Join(t.TempDir(), "a.gguf")
	data := make([]byte, 4<<20)
	rand.Read(data)
	if err := os.WriteFile(weights, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{hostMemory: 1 << 30, models: map[string]ModelConfig{
		"a": {Weights: []string{weights}, WeightBytes: uint64(len(data))},
	}})
	release := h.procs["b"].hold()
	b := h.acquire("b")
	h.world.expect(t, "starting b")
	a := h.acquire("a") // waits for b's swap: the scheduler holds it
	a.held(t, false)
	if got := h.status("a").ReadAheadBytes; got != uint64(len(data)) {
		t.Fatalf("a's read-ahead lease while its request waits: %d bytes, want %d", got, len(data))
	}
	// The kernel reads it in the background; reading it here waits for
	// nothing but proves the pages were asked for without error.
	if _, size, err := pagecache.Resident(weights); err != nil || size != uint64(len(data)) {
		t.Fatalf("Resident: %d, %v", size, err)
	}
	release()
	b.wait(t).Release()
	a.wait(t).Release()
	if got := h.status("a").ReadAheadBytes; got != 0 {
		t.Fatalf("a's read-ahead lease after its load: %d bytes, want none", got)
	}
}

// Without host memory to hold them, weights are not read ahead.
func TestReadAhead_NotWithoutHostMemory(t *testing.T) {
	h := newHarness(t, harnessOpts{hostMemory: 1 << 20, models: map[string]ModelConfig{
		"a": {Weights: []string{"/nonexistent"}, WeightBytes: 4 << 20},
	}})
	release := h.procs["b"].hold()
	b := h.acquire("b")
	h.world.expect(t, "starting b")
	a := h.acquire("a")
	a.held(t, false)
	if got := h.status("a").ReadAheadBytes; got != 0 {
		t.Fatalf("read-ahead lease with 1 MiB of host memory for 4 MiB of weights: %d, want none", got)
	}
	release()
	b.wait(t).Release()
	a.wait(t).Release()
}
