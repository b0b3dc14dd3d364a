// Package decode is the timing model of a simulated model server: how long
// a request's prefill takes, how long one decode step of a batch takes, and
// iteration-level continuous batching. It reads no clock: the sim backend's
// server process (backends/sim/server) runs it in real time and `loadout
// simulate` (host/sim) in virtual time, so the two cannot drift.
//
// The rules:
//
//   - Prefill of a request with p prompt tokens takes
//     TTFT + p / PrefillTokensPerSecond (the second term is 0 when
//     PrefillTokensPerSecond is 0); prefills run side by side, outside
//     the decode batch.
//   - A decode step of b sequences takes (1 + 0.05·(b−1)) / TokensPerSecond
//     seconds and gives each of the b sequences one token: a batch of 8
//     makes 8 tokens in 1.35 steps' time, 5.9× a lone sequence's rate.
//   - At most MaxBatch sequences decode together. A sequence that finishes
//     prefill joins the batch at the next step, in arrival order, without
//     waiting for the running ones to finish (iteration-level scheduling,
//     as in Orca and vLLM).
package decode

import (
	"errors"
	"fmt"
	"time"
)

// BatchPenalty is how much longer a decode step gets per extra sequence
// in it, as a fraction of a lone sequence's step.
const BatchPenalty = 0.05

// Model is one simulated server's timing.
type Model struct {
	// TTFT is the fixed part of a request's prefill.
	TTFT time.Duration
	// PrefillTokensPerSecond is the prompt processing rate; 0 means the
	// prefill is TTFT whatever the prompt's length.
	PrefillTokensPerSecond float64
	// TokensPerSecond is the decode rate of a lone sequence, > 0.
	TokensPerSecond float64
	// MaxBatch is how many sequences decode together, ≥ 1.
	MaxBatch int
}

// The bounds Validate keeps a model within, so that every step, prefill
// and replay's total stays a time.Duration (int64 nanoseconds, 292 years):
// at the slowest a step of a full batch is under 10⁶ s, and the prefill of
// a trace's largest prompt (10⁷ tokens) 10⁷ s.
const (
	MinTokensPerSecond        = 0.01 // a token every 100 s
	MaxTokensPerSecond        = 1e9  // a step of 1 ns
	MinPrefillTokensPerSecond = 1    // when not 0
	MaxMaxBatch               = 65536
	MaxTTFT                   = 24 * time.Hour
)

// Validate reports a decode rate outside MinTokensPerSecond to
// MaxTokensPerSecond, a TTFT outside 0 to MaxTTFT, a prefill rate neither 0 nor within
// MinPrefillTokensPerSecond to MaxTokensPerSecond, or a MaxBatch outside 1
// to MaxMaxBatch.
func (m Model) Validate() error {
	var errs []error
	if m.TTFT < 0 || m.TTFT > MaxTTFT {
		errs = append(errs, fmt.Errorf("ttft must be 0 to %s, got %s", MaxTTFT, m.TTFT))
	}
	if !(m.TokensPerSecond >= MinTokensPerSecond && m.TokensPerSecond <= MaxTokensPerSecond) {
		errs = append(errs, fmt.Errorf("tokens per second must be %v to %v, got %v", MinTokensPerSecond, MaxTokensPerSecond, m.TokensPerSecond))
	}
	if m.PrefillTokensPerSecond != 0 && !(m.PrefillTokensPerSecond >= MinPrefillTokensPerSecond && m.PrefillTokensPerSecond <= MaxTokensPerSecond) {
		errs = append(errs, fmt.Errorf("prefill tokens per second must be 0 (the prefill is ttft alone) or %v to %v, got %v", MinPrefillTokensPerSecond, MaxTokensPerSecond, m.PrefillTokensPerSecond))
	}
	if m.MaxBatch < 1 || m.MaxBatch > MaxMaxBatch {
		errs = append(errs, fmt.Errorf("max batch must be 1 to %d, got %d", MaxMaxBatch, m.MaxBatch))
	}
	return errors.Join(errs...)
}

// Prefill is how long the prefill of a prompt of promptTokens takes.
func (m Model) Prefill(promptTokens int) time.Duration {
	d := m.TTFT
	if m.PrefillTokensPerSecond > 0 && promptTokens > 0 {
		d += time.Duration(float64(promptTokens) / m.PrefillTokensPerSecond * float64(time.Second))
	}
	return d
}

// Step is how long one decode step of b ≥ 1 sequences takes.
func (m Model) Step(b int) time.Duration {
	lone := float64(time.Second) / m.TokensPerSecond
	return time.Duration(lone * (1 + BatchPenalty*float64(max(b, 1)-1)))
}

// Batch is continuous batching over sequences of any type: those that
// joined wait for the next step; each step takes up to MaxBatch of them in
// arrival order. It is not safe for concurrent use.
type Batch[S any] struct {
	m               Model
	active, waiting []S
}

// NewBatch returns an empty batch of model m.
func NewBatch[S any](m Model) *Batch[S] { return &Batch[S]{m: m} }

// Join adds s; it decodes from the next step on.
func (b *Batch[S]) Join(s S) { b.waiting = append(b.waiting, s) }

// Begin starts a step: it admits waiting sequences up to MaxBatch and
// returns the step's sequences and its duration; none and 0 when there is
// nothing to decode. The slice is the batch's own until End.
func (b *Batch[S]) Begin() ([]S, time.Duration) {
	for len(b.active) < b.m.MaxBatch && len(b.waiting) > 0 {
		b.active = append(b.active, b.waiting[0])
		var zero S
		b.waiting[0] = zero
		b.waiting = b.waiting[1:]
	}
	if len(b.active) == 0 {
		return nil, 0
	}
	return b.active, b.m.Step(len(b.active))
}

// End finishes a step: it calls emit for each of the step's sequences in
// order (each got one token) and drops those for which emit reports done.
func (b *Batch[S]) End(emit func(S) (done bool)) {
	kept := b.active[:0]
	for _, s := range b.active {
		if !emit(s) {
			kept = append(kept, s)
		}
	}
	var zero S
	for i := len(kept); i < len(b.active); i++ {
		b.active[i] = zero
	}
	b.active = kept
}

// Drop removes the sequences, active or waiting, for which gone reports
// true (a client that left).
func (b *Batch[S]) Drop(gone func(S) bool) {
	b.active = drop(b.active, gone)
	b.waiting = drop(b.waiting, gone)
}

func drop[S any](ss []S, gone func(S) bool) []S {
	kept := ss[:0]
	for _, s := range ss {
		if !gone(s) {
			kept = append(kept, s)
		}
	}
	var zero S
	for i := len(kept); i < len(ss); i++ {
		ss[i] = zero
	}
	return kept
}

// Active is the number of sequences decoding in the current step.
func (b *Batch[S]) Active() int { return len(b.active) }

// Idle reports whether nothing decodes and nothing waits.
func (b *Batch[S]) Idle() bool { return len(b.active) == 0 && len(b.waiting) == 0 }
