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
// capped at 2,000). A drifting workload (Drift, Releases) moves the
// models' popularity through the trace, as a real one's does when models
// are released, tried and dropped; its bursts pick among the models
// already released. A workload of conversations (Turns) has each user
// arrival start several requests to its model, minutes apart, as chat
// users do.
type Production struct {
	Name     string  // the workload's name (--workload; the file's stem)
	Models   int     // how many models, m1…mN
	Requests int     // the expected number of requests, bursts included
	Days     float64 // the trace's length
	ZipfS    float64 // popularity's exponent (> 1); 0: 1.5
	BurstP   float64 // the share of arrivals that start a burst; 0: 0.01
	Mixed    bool    // models of four sizes and load times (ModelClasses) instead of one
	// Drift is how far popularity moves: the standard deviation, per
	// day, of each model's log weight, a random walk stepped every hour
	// (by Drift/√24); 0: the Zipf order holds for the whole trace.
	Drift float64
	// Releases is how many models (drawn at random) are released during
	// the trace rather than before it, at times uniform over its middle
	// 80%: none of their requests come earlier, and at release each is
	// asked for as the most popular model is, its surplus fading with a
	// time constant of three days to its own Zipf weight.
	Releases int
	// Turns is the mean length of a user's conversation: each user
	// arrival then starts a geometric number of requests (mean Turns) to
	// the one model it drew, a log-normal think time apart (median 40 s,
	// the time to read an answer and type the next message); 0 or 1:
	// every user request stands alone.
	Turns float64
	Seed  uint64
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
// on four equal slots. The -drift and -chat ones are the same boxes
// under traffic whose popularity moves (and, -chat, comes in
// conversations).
var Productions = []Production{
	{Name: "prod-sample", Models: 30, Requests: 1500, Days: 2, Seed: 1},
	{Name: "prod-mixed-sample", Models: 30, Requests: 1500, Days: 2, Mixed: true, Seed: 2},
	{Name: "prod-3w", Models: 86, Requests: 27000, Days: 21, Seed: 3},
	{Name: "prod-mixed-1w", Models: 40, Requests: 9000, Days: 7, Mixed: true, Seed: 4},
	{Name: "prod-drift-3w", Models: 86, Requests: 27000, Days: 21, Drift: 0.5, Releases: 10, Seed: 5},
	{Name: "prod-mixed-drift-1w", Models: 40, Requests: 9000, Days: 7, Mixed: true, Drift: 0.5, Releases: 4, Seed: 6},
	{Name: "prod-chat-3w", Models: 86, Requests: 27000, Days: 21, Drift: 0.5, Releases: 10, Turns: 6, Seed: 7},
	{Name: "prod-mixed-chat-1w", Models: 40, Requests: 9000, Days: 7, Mixed: true, Drift: 0.5, Releases: 4, Turns: 6, Seed: 8},
}

// Check reports the first setting a workload cannot be generated with:
// no models, no requests or days, a Zipf exponent at or below 1, a burst
// share outside [0, 1), a negative drift or turns, releases outside [0,
// models).
func (p Production) Check() error {
	switch {
	case p.Models < 1:
		return fmt.Errorf("models %d: want at least 1", p.Models)
	case p.Requests < 1 || p.Days <= 0:
		return fmt.Errorf("requests %d over %g days: want both above 0", p.Requests, p.Days)
	case p.ZipfS != 0 && p.ZipfS <= 1:
		return fmt.Errorf("zipf exponent %g: want above 1", p.ZipfS)
	case p.BurstP < 0 || p.BurstP >= 1:
		return fmt.Errorf("burst share %g: want in [0, 1)", p.BurstP)
	case p.Drift < 0 || math.IsNaN(p.Drift) || math.IsInf(p.Drift, 0):
		return fmt.Errorf("drift %g: want 0 or more", p.Drift)
	case p.Releases < 0 || p.Releases >= p.Models:
		return fmt.Errorf("releases %d: want from 0 to %d (fewer than the %d models)", p.Releases, p.Models-1, p.Models)
	case p.Turns < 0 || math.IsNaN(p.Turns) || math.IsInf(p.Turns, 0):
		return fmt.Errorf("turns %g: want 0 or more", p.Turns)
	}
	return nil
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
	turns := max(p.Turns, 1)
	events := float64(p.Requests) / (1 + pb*(burstMean-1) + (1-pb)*(turns-1))
	peak := events / (span * mean) // arrivals per second at rate shape 1
	zipf := rand.NewZipf(r, s, 1, uint64(p.Models-1))
	var pop *popularity
	if p.Drift > 0 || p.Releases > 0 {
		pop = newPopularity(p, s, span)
	}
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
			m := 0
			if pop != nil {
				m = pop.draw(r, t)
			} else {
				m = int(zipf.Uint64())
			}
			q := Request{Arrival: t, Model: fmt.Sprintf("m%d", m+1),
				PromptTokens: tokens(600, 16000), OutputTokens: tokens(180, 2000), Client: fmt.Sprintf("user-%d", r.IntN(userCount))}
			out = append(out, q)
			for turns > 1 && r.Float64() >= 1/turns { // the conversation's next turn
				q.Arrival += 40 * math.Exp(0.8*r.NormFloat64())
				q.PromptTokens, q.OutputTokens = tokens(600, 16000), tokens(180, 2000)
				out = append(out, q)
			}
			continue
		}
		bursts++
		m := r.IntN(p.Models)
		for pop != nil && !pop.released(m, t) {
			m = r.IntN(p.Models)
		}
		model, client, at := fmt.Sprintf("m%d", 1+m), fmt.Sprintf("batch-%d", bursts), t
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

// popularity is a drifting workload's model weights through time: model
// i's Zipf weight (1+i)^-s times e^X, X a random walk of its own, and
// for a model released during the trace nothing before its release and a
// surplus after it (see Production.Drift and Releases). The weights are
// worked out once an hour of the trace.
type popularity struct {
	base, walk, release []float64 // release: seconds from the start; 0 for a model there from it
	cum                 []float64 // the cumulative weights of hour
	hour                int
	step                float64 // the walk's standard deviation per hour
	r                   *rand.Rand
}

// releaseFade is the time constant, in seconds, of a released model's
// surplus of popularity.
const releaseFade = 3 * 86400

func newPopularity(p Production, s, span float64) *popularity {
	pop := &popularity{
		base: make([]float64, p.Models), walk: make([]float64, p.Models), release: make([]float64, p.Models),
		cum: make([]float64, p.Models), hour: -1, step: p.Drift / math.Sqrt(24),
		r: rand.New(rand.NewPCG(p.Seed^0x9e3779b97f4a7c15, p.Seed)), // its own: the arrivals draw as an undrifting workload's
	}
	for i := range pop.base {
		pop.base[i] = math.Pow(1+float64(i), -s)
	}
	for _, i := range pop.r.Perm(p.Models)[:min(p.Releases, p.Models-1)] {
		pop.release[i] = span * (0.1 + 0.8*pop.r.Float64())
	}
	return pop
}

// released reports whether model i can be asked for at t seconds.
func (p *popularity) released(i int, t float64) bool { return p.release[i] <= t }

// draw is a model (0-based) drawn by the weights at t seconds, which
// must not go back in time between calls.
func (p *popularity) draw(r *rand.Rand, t float64) int {
	if h := int(t / 3600); h != p.hour {
		for ; p.hour < h; p.hour++ {
			for i := range p.walk {
				p.walk[i] += p.step * p.r.NormFloat64()
			}
		}
		end := float64(h+1) * 3600 // the hour's weights: a model released in it counts from it
		total := 0.0
		for i, b := range p.base {
			if p.release[i] > 0 {
				if p.release[i] >= end {
					p.cum[i] = total
					continue
				}
				b += (p.base[0] - b) * math.Exp(-max(0, float64(h)*3600-p.release[i])/releaseFade)
			}
			total += b * math.Exp(p.walk[i])
			p.cum[i] = total
		}
	}
	for {
		i, _ := slices.BinarySearch(p.cum, r.Float64()*p.cum[len(p.cum)-1])
		if i < len(p.cum) && p.released(i, t) {
			return i
		}
	}
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
