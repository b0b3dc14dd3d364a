package decode

import (
	"testing"
	"time"
)

func TestModel_Rules(t *testing.T) {
	m := Model{TTFT: 100 * time.Millisecond, PrefillTokensPerSecond: 1000, TokensPerSecond: 50, MaxBatch: 4}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := m.Prefill(500); got != 600*time.Millisecond {
		t.Errorf("prefill of 500 tokens = %v, want 100ms + 500/1000 s", got)
	}
	if got := (Model{TTFT: time.Second, TokensPerSecond: 1, MaxBatch: 1}).Prefill(10_000); got != time.Second {
		t.Errorf("prefill without a rate = %v, want the TTFT alone", got)
	}
	if got, want := m.Step(1), 20*time.Millisecond; got != want {
		t.Errorf("step of 1 = %v, want %v", got, want)
	}
	if got, want := m.Step(5), 24*time.Millisecond; got != want { // 20 ms × (1 + 0.05·4)
		t.Errorf("step of 5 = %v, want %v", got, want)
	}
	// The slowest model within bounds: a full batch's step and the
	// largest prompt's prefill are positive durations.
	slow := Model{TTFT: MaxTTFT, PrefillTokensPerSecond: MinPrefillTokensPerSecond, TokensPerSecond: MinTokensPerSecond, MaxBatch: MaxMaxBatch}
	if err := slow.Validate(); err != nil || slow.Step(MaxMaxBatch) <= 0 || slow.Prefill(10_000_000) <= 0 {
		t.Errorf("slowest model: %v, step %v, prefill %v", err, slow.Step(MaxMaxBatch), slow.Prefill(10_000_000))
	}
	for _, bad := range []Model{{TokensPerSecond: 0, MaxBatch: 1}, {TokensPerSecond: 1, MaxBatch: 0}, {TTFT: -1, TokensPerSecond: 1, MaxBatch: 1}, {PrefillTokensPerSecond: -1, TokensPerSecond: 1, MaxBatch: 1},
		// Rates and sizes whose steps or prefills leave a time.Duration
		// (a replay reported a negative TTFT at 1e-10 tokens/s).
		{TokensPerSecond: 1e-10, MaxBatch: 1}, {TokensPerSecond: 1e12, MaxBatch: 1},
		{PrefillTokensPerSecond: 1e-6, TokensPerSecond: 1, MaxBatch: 1}, {TokensPerSecond: 1, MaxBatch: 1 << 30},
		{TTFT: 1000 * time.Hour, TokensPerSecond: 1, MaxBatch: 1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

// A sequence that joins while others decode starts at the next step, in
// arrival order, up to MaxBatch; finished ones leave without holding the
// rest back.
func TestBatch_ContinuousBatching(t *testing.T) {
	b := NewBatch[*int](Model{TokensPerSecond: 10, MaxBatch: 2})
	left := map[*int]int{}
	seq := func(n int) *int { p := new(int); left[p] = n; return p }
	emit := func(s *int) bool { left[s]--; *s++; return left[s] == 0 }

	a, c, d := seq(1), seq(3), seq(2)
	b.Join(a)
	if got, dur := b.Begin(); len(got) != 1 || dur != 100*time.Millisecond {
		t.Fatalf("step 1: %d sequences, %v", len(got), dur)
	}
	b.Join(c) // arrives during step 1
	b.Join(d)
	b.End(emit) // a finishes
	got, dur := b.Begin()
	if len(got) != 2 || got[0] != c || got[1] != d || dur != 105*time.Millisecond {
		t.Fatalf("step 2: %v, %v; want c and d, 105ms", got, dur)
	}
	b.End(emit)
	b.End(emit) // d finishes after two tokens; c has one left
	if got, _ := b.Begin(); len(got) != 1 || got[0] != c {
		t.Fatalf("step 4: %v, want c alone", got)
	}
	b.Drop(func(s *int) bool { return s == c }) // its client left
	if !b.Idle() || b.Active() != 0 {
		t.Fatal("a dropped sequence is still in the batch")
	}
	if *a != 1 || *d != 2 || *c != 2 {
		t.Fatalf("tokens: a %d, d %d, c %d", *a, *d, *c)
	}
}
