package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// Production is a generated workload shaped like a shared box's
// multi-model traffic, where the Azure traces (one service, one hour)
// are not: a long tail of models, daily and weekly rhythms, bursts from
// one client, and (Mixed) models of mixed sizes and load times. The same
// Production gives the same trace, byte for byte.
//
// Arrivals are a Poisson process whose rate follows the hour of the day
// (quiet from midnight to 07:00 at a tenth of the peak, the peak from
// 09:00 to 18:00, evenings at 40%) times the day of the week (Saturday
// and Sunday at 35%), drawn by thinning; the trace starts on a Monday at
// midnight. Each arrival is one request from one of 200 users, its model
// drawn from a Zipf law of exponent ZipfS over the models (m1 the most
// popular); or, with probability BurstP, a burst from one batch client: a
// model drawn uniformly (batch jobs favour no model), a geometric number
// of requests (mean 25) a mean of 2 s apart. Prompts are log-normal
// (median 600 tokens, capped at 16,000), outputs log-normal (median 180,
// capped at 2,000).
type Production struct {
	Name     string  // the workload's name (--workload; the file's stem)
	Models   int     // how many models, m1…mN
	Requests int     // the expected number of requests, bursts included
	Days     float64 // the trace's length
	ZipfS    float64 // popularity's exponent (> 1); 0: 1.5
	BurstP   float64 // the share of arrivals that start a burst; 0: 0.01
	Mixed    bool    // models of four sizes and load times (ModelClasses) instead of one
	Seed     uint64
}

// ModelClass is a model size on the generated box, with its load time:
// the shape of 7B to 70B models at 4–8 bits on llama-server.
type ModelClass struct {
	VRAMGiB    int
	LoadS      int // cold load, seconds
	TokensPerS int
	Per10      int // of every 10 models, how many are of this class
}

// ModelClasses are the sizes of a Mixed workload's models: model i is of
// by i mod 10, Per10 of every 10 in each class (most are small).
var ModelClasses = []ModelClass{
	{VRAMGiB: 8, LoadS: 6, TokensPerS: 90, Per10: 5},
	{VRAMGiB: 16, LoadS: 12, TokensPerS: 60, Per10: 3},
	{VRAMGiB: 24, LoadS: 20, TokensPerS: 40, Per10: 1},
	{VRAMGiB: 48, LoadS: 45, TokensPerS: 20, Per10: 1},
}

// Productions are the named generated workloads. The -sample ones are
// committed under testdata/traces (with their boxes under
// testdata/simulate); the others are generated when needed (`go run
// ./host/sim/gentraces -workload NAME`): prod-3w has the shape of a
// held-out real trace — three weeks, about 27,000 requests over 86 models,
// on four equal slots.
var Productions = []Production{
	{Name: "prod-sample", Models: 30, Requests: 1500, Days: 2, Seed: 1},
	{Name: "prod-mixed-sample", Models: 30, Requests: 1500, Days: 2, Mixed: true, Seed: 2},
	{Name: "prod-3w", Models: 86, Requests: 27000, Days: 21, Seed: 3},
	{Name: "prod-mixed-1w", Models: 40, Requests: 9000, Days: 7, Mixed: true, Seed: 4},
}

// ProductionByName is the named workload of Productions.
func ProductionByName(name string) (Production, bool) {
	i := slices.IndexFunc(Productions, func(p Production) bool { return p.Name == name })
	if i < 0 {
		return Production{}, false
	}
	return Productions[i], true
}

// rateShape is the relative request rate at t seconds from a Monday's
// midnight, at most 1.
func rateShape(t float64) float64 {
	h := math.Mod(t/3600, 24)
	day := int(t/86400) % 7
	var r float64
	switch {
	case h < 7:
		r = 0.1
	case h < 9:
		r = 0.1 + 0.45*(h-7) // the morning ramp
	case h < 18:
		r = 1
	default:
		r = 0.4
	}
	if day >= 5 {
		r *= 0.35
	}
	return r
}

// Generate is the workload's requests, in arrival order.
func (p Production) Generate() []Request {
	r := rand.New(rand.NewPCG(p.Seed, p.Seed^0x5851f42d4c957f2d))
	s := p.ZipfS
	if s == 0 {
		s = 1.5
	}
	pb := p.BurstP
	if pb == 0 {
		pb = 0.01
	}
	const burstMean, userCount = 25.0, 200
	span := p.Days * 86400
	var mean float64 // the rate shape's mean over the span
	for t := 0.0; t < span; t += 60 {
		mean += rateShape(t + 30)
	}
	mean /= math.Ceil(span / 60)
	events := float64(p.Requests) / (1 + pb*(burstMean-1))
	peak := events / (span * mean) // arrivals per second at rate shape 1
	zipf := rand.NewZipf(r, s, 1, uint64(p.Models-1))
	tokens := func(median, limit float64) int {
		return int(min(math.Round(median*math.Exp(0.9*r.NormFloat64())), limit)) + 1
	}
	var out []Request
	bursts := 0
	for t := r.ExpFloat64() / peak; t < span; t += r.ExpFloat64() / peak {
		if r.Float64() >= rateShape(t) {
			continue // thinning
		}
		if r.Float64() >= pb {
			out = append(out, Request{Arrival: t, Model: fmt.Sprintf("m%d", zipf.Uint64()+1),
				PromptTokens: tokens(600, 16000), OutputTokens: tokens(180, 2000), Client: fmt.Sprintf("user-%d", r.IntN(userCount))})
			continue
		}
		bursts++
		model, client, at := fmt.Sprintf("m%d", 1+r.IntN(p.Models)), fmt.Sprintf("batch-%d", bursts), t
		for {
			out = append(out, Request{Arrival: at, Model: model, PromptTokens: tokens(600, 16000), OutputTokens: tokens(180, 2000), Client: client})
			if r.Float64() < 1/burstMean {
				break
			}
			at += 2 * r.ExpFloat64()
		}
	}
	slices.SortStableFunc(out, func(a, b Request) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
	for i := range out { // milliseconds, as a recorded trace has them
		out[i].Arrival = math.Round(out[i].Arrival*1000) / 1000
	}
	return out
}

// class is model i's (0-based) ModelClass in a Mixed workload.
func (p Production) class(i int) ModelClass {
	slot := i % 10
	for _, c := range ModelClasses {
		if slot < c.Per10 {
			return c
		}
		slot -= c.Per10
	}
	return ModelClasses[0]
}

// Trace is the workload as a trace file's bytes.
func (p Production) Trace() ([]byte, error) {
	var b bytes.Buffer
	tw := NewTraceWriter(&b)
	for _, q := range p.Generate() {
		if err := tw.Write(q); err != nil {
			return nil, err
		}
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Config is the box to replay the workload on, as a `loadout simulate`
// configuration: two GPUs and m1…mN of the sim backend. Equal models are
// 12 GiB (load 10 s) on two 24 GiB GPUs: four slots. Mixed models take
// their ModelClass on two 48 GiB GPUs.
func (p Production) Config() []byte {
	var b bytes.Buffer
	gpu, kind := 24, "equal 12 GiB models (four slots)"
	if p.Mixed {
		gpu, kind = 48, "models of 8 to 48 GiB, loads of 6 to 45 s"
	}
	fmt.Fprintf(&b, "# The box of the generated workload %s (host/sim.Productions, seed %d): %d %s.\n", p.Name, p.Seed, p.Models, kind)
	fmt.Fprintf(&b, "# Written by go run ./host/sim/gentraces -workload %s.\n", p.Name)
	fmt.Fprintf(&b, "gpus:\n  - {name: gpu0, memory: %dGiB}\n  - {name: gpu1, memory: %dGiB}\nglobalTTL: 0\nmodels:\n", gpu, gpu)
	for i := range p.Models {
		c := equalSlot
		if p.Mixed {
			c = p.class(i)
		}
		writeSimModel(&b, fmt.Sprintf("m%d", i+1), c)
	}
	return b.Bytes()
}

// equalSlot is the model of a box of equal slots: 12 GiB, a 10 s cold
// load, 80 tokens/s per sequence (a 7–8B model at Q8 on a 24 GiB card).
var equalSlot = ModelClass{VRAMGiB: 12, LoadS: 10, TokensPerS: 80}

// writeSimModel writes one model of the sim backend of class c to a
// models: block, under key (a YAML key: a plain name, or one quoted).
func writeSimModel(b *bytes.Buffer, key string, c ModelClass) {
	fmt.Fprintf(b, "  %s:\n    backend: sim\n    concurrencyLimit: 32\n    options: {load_time: %ds, vram: %dGiB, tokens_per_second: %d, ttft: 80ms, prefill_tokens_per_second: 8000, max_batch: 32}\n",
		key, c.LoadS, c.VRAMGiB, c.TokensPerS)
}

// SlotsConfig is a box of slots equal slots for a trace that names
// models (simulate's --slots): each model a 12 GiB sim model with a 10 s
// cold load and 80 tokens/s per sequence (equalSlot), on one GPU of
// slots × 12 GiB, routed by prioritylru (the VRAM-aware LRU router; --router
// and --compare replace it). The classical anchors and Belady's optimum
// then count exactly these slots. Errors: slots below 1, no models.
func SlotsConfig(models []string, slots int) ([]byte, error) {
	if slots < 1 {
		return nil, fmt.Errorf("want at least 1 slot, got %d", slots)
	}
	if len(models) == 0 {
		return nil, errors.New("the trace names no model")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# simulate --slots %d: %d equal slots for the %d models of the trace.\n", slots, slots, len(models))
	fmt.Fprintf(&b, "gpus:\n  - {name: slots, memory: %dGiB}\nglobalTTL: 0\nrouting:\n  router:\n    use: prioritylru\nmodels:\n", slots*equalSlot.VRAMGiB)
	for _, m := range models {
		writeSimModel(&b, strconv.Quote(m), equalSlot) // any id a trace uses: YAML reads Go's quoting of it
	}
	return b.Bytes(), nil
}
