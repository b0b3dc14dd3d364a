package gpu

import (
	"fmt"
	"testing"
)

// The ledger is read for every snapshot a policy asks for (GPU free,
// leased) and changed on every swap. With declared devices these figures
// are the ledger's own cost; with NVML add one memory query per device.
//
//	go test ./host/gpu -run '^$' -bench . -benchmem

// busyLedger is 2×80 GiB declared devices with 16 leases.
func busyLedger(b *testing.B) *Ledger {
	l := NewLedger(NewDeclared([]DeclaredDevice{{Name: "a", Memory: 80 * gib}, {Name: "b", Memory: 80 * gib}}), 512*mib)
	for i := range 16 {
		if err := l.Acquire(fmt.Sprintf("model-%02d", i), map[int]uint64{i % 2: 4 * gib}); err != nil {
			b.Fatal(err)
		}
	}
	return l
}

// BenchmarkLedger_Leases: what a snapshot's GPU table costs.
func BenchmarkLedger_Leases(b *testing.B) {
	l := busyLedger(b)
	b.ReportAllocs()
	for range b.N {
		if _, err := l.Leases(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLedger_Reserve: one swap's lease: evict one model, place and
// lease the target, then give it back.
func BenchmarkLedger_Reserve(b *testing.B) {
	l := busyLedger(b)
	b.ReportAllocs()
	for range b.N {
		if _, err := l.Reserve("target", 40*gib, nil, []string{"model-03"}); err != nil {
			b.Fatal(err)
		}
		l.Release("target")
		if err := l.Acquire("model-03", map[int]uint64{1: 4 * gib}); err != nil {
			b.Fatal(err)
		}
	}
}
