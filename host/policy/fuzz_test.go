package policy

import (
	"context"
	"testing"
)

// FuzzCompile: no byte string makes Compile panic or hang; it either
// compiles a module that passed every check or returns an error naming it.
func FuzzCompile(f *testing.F) {
	f.Add(miniPolicy().bytes())
	swapper := miniPolicy()
	swapper.kind = 2
	f.Add(swapper.bytes())
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	r, _ := newTestRuntime(f, Options{})
	f.Fuzz(func(t *testing.T, wasm []byte) {
		m, err := r.Compile(context.Background(), "fuzz.wasm", wasm)
		if err != nil {
			if msg := err.Error(); len(msg) < len("policy fuzz.wasm: ") || msg[:len("policy fuzz.wasm: ")] != "policy fuzz.wasm: " {
				t.Fatalf("error does not name the module: %v", err)
			}
			return
		}
		m.Close(context.Background())
	})
}
