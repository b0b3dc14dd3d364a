package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// ReadAzure reads a trace of the Azure LLM inference dataset (2023:
// columns TIMESTAMP, ContextTokens, GeneratedTokens; the files under
// shared/traces/azure-llm-2023) as requests with no model: arrival in
// seconds from the first request, prompt and output tokens as given. Only
// requests that arrive within window of the first are kept (0: all).
// Errors name the file and line.
func ReadAzure(name string, r io.Reader, window time.Duration) ([]Request, error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		return nil, csvError(name, err, 0)
	}
	if strings.Join(header, ",") != "TIMESTAMP,ContextTokens,GeneratedTokens" {
		return nil, &TraceError{File: name, Line: 1, Msg: fmt.Sprintf("header %q, want TIMESTAMP,ContextTokens,GeneratedTokens", strings.Join(header, ","))}
	}
	const layout = "2006-01-02 15:04:05.9999999"
	var out []Request
	var start time.Time
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, csvError(name, err, len(header))
		}
		line, _ := cr.FieldPos(0)
		at, err := time.Parse(layout, rec[0])
		if err != nil {
			return nil, &TraceError{File: name, Line: line, Column: "TIMESTAMP", Msg: err.Error()}
		}
		if start.IsZero() {
			start = at
		}
		if window > 0 && at.Sub(start) > window {
			return out, nil
		}
		in, err1 := strconv.Atoi(rec[1])
		gen, err2 := strconv.Atoi(rec[2])
		if err1 != nil || err2 != nil || in < 0 || gen < 0 {
			return nil, &TraceError{File: name, Line: line, Msg: fmt.Sprintf("token counts %q, %q: want integers ≥ 0", rec[1], rec[2])}
		}
		arrival := max(at.Sub(start).Seconds(), 0)
		if n := len(out); n > 0 {
			arrival = max(arrival, out[n-1].Arrival) // the dataset is sorted; keep it so at the millisecond
		}
		out = append(out, Request{Arrival: arrival, PromptTokens: in, OutputTokens: gen})
	}
}

// Mix is a rule that gives each request of a model-less trace a model,
// deterministically from its seed.
type Mix struct {
	// Models are the model names, most popular first for Zipf.
	Models []string
	// Kind is MixZipf or MixAgent.
	Kind string
	// Seed makes the assignment reproducible: the same trace, mix and seed
	// give the same models.
	Seed uint64
	// ZipfS is Zipf's exponent (> 1); 0 means 1.2.
	ZipfS float64
	// MaxSet is MixAgent's largest working set: each burst uses 2 to
	// MaxSet models, uniformly; 0 means 3. A set larger than the box's
	// slots is where LRU evicts, every request, the model asked for next.
	MaxSet int
	// Shuffle makes MixAgent draw each request's model uniformly from
	// the burst's set instead of cycling through it in order.
	Shuffle bool
	// Agents is MixTenants' number of agents; 0 means 2.
	Agents int
	// ChatShare is MixTenants' share of requests from chat users, in
	// [0, 1].
	ChatShare float64
}

// Mix kinds.
const (
	// MixZipf draws every request's model independently from a Zipf law
	// over Models: the i-th model (0-based) with probability proportional
	// to 1/(i+1)^s. A few popular models and a long tail, as on a shared
	// box serving many fine-tunes.
	MixZipf = "zipf"
	// MixAgent models agents that alternate between a few models (a
	// planner, a coder, an embedder): the trace is cut into bursts whose
	// lengths are geometric with mean 20 requests; each burst picks 2 or 3
	// models (2 to Mix.MaxSet) uniformly from Models and cycles through
	// them request by request (or draws from them, Mix.Shuffle), so
	// consecutive requests change model often within a small working set
	// that moves between bursts.
	MixAgent = "agent"
	// MixTenants models a box shared by chat users and agents: each
	// request is a chat user's (Mix.ChatShare of them: a Zipf law over
	// Models, as MixZipf) or, uniformly, one of Mix.Agents agents', each
	// moving through working sets of its own as MixAgent's one agent does.
	MixTenants = "tenants"
)

// agent is one agent of MixAgent or MixTenants: its working set, the
// requests left in its burst, and where it is in the set.
type agent struct {
	set       []string
	left, pos int
}

// next is the agent's next model, drawn with r: a new burst of 2 to
// maxSet of m.Models when the last one ended, cycled or (m.Shuffle)
// drawn from.
func (a *agent) next(r *rand.Rand, m *Mix, maxSet int) string {
	if a.left == 0 {
		size := min(2+r.IntN(maxSet-1), len(m.Models))
		a.set = a.set[:0]
		for _, j := range r.Perm(len(m.Models))[:size] {
			a.set = append(a.set, m.Models[j])
		}
		a.left, a.pos = 1, 0
		for r.Float64() > 1.0/20 { // geometric, mean 20
			a.left++
		}
	}
	if m.Shuffle {
		a.pos = r.IntN(len(a.set))
	}
	model := a.set[a.pos%len(a.set)]
	a.pos++
	a.left--
	return model
}

// Assign returns a copy of reqs with models given by m.
// Errors: no models, an unknown kind, a Zipf exponent ≤ 1, an agent's
// MaxSet below 2, a ChatShare outside [0, 1], Agents below 0.
func Assign(reqs []Request, m Mix) ([]Request, error) {
	if len(m.Models) == 0 {
		return nil, fmt.Errorf("mix: no models")
	}
	r := rand.New(rand.NewPCG(m.Seed, m.Seed^0x9e3779b97f4a7c15))
	out := make([]Request, len(reqs))
	copy(out, reqs)
	zipf := func() (*rand.Zipf, error) {
		s := m.ZipfS
		if s == 0 {
			s = 1.2
		}
		if s <= 1 {
			return nil, fmt.Errorf("mix: zipf exponent %g, want > 1", s)
		}
		return rand.NewZipf(r, s, 1, uint64(len(m.Models)-1)), nil
	}
	maxSet := m.MaxSet
	if maxSet == 0 {
		maxSet = 3
	}
	if maxSet < 2 && m.Kind != MixZipf {
		return nil, fmt.Errorf("mix: agent working sets of at most %d models, want at least 2", maxSet)
	}
	switch m.Kind {
	case MixZipf:
		z, err := zipf()
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i].Model = m.Models[z.Uint64()]
		}
	case MixAgent:
		var a agent
		for i := range out {
			out[i].Model = a.next(r, &m, maxSet)
		}
	case MixTenants:
		n := m.Agents
		if n == 0 {
			n = 2
		}
		if n < 0 || !(m.ChatShare >= 0 && m.ChatShare <= 1) {
			return nil, fmt.Errorf("mix: %d agents and a chat share of %g, want agents ≥ 0 and a share in [0, 1]", m.Agents, m.ChatShare)
		}
		z, err := zipf()
		if err != nil {
			return nil, err
		}
		agents := make([]agent, n)
		for i := range out {
			if r.Float64() < m.ChatShare {
				out[i].Model = m.Models[z.Uint64()]
			} else {
				out[i].Model = agents[r.IntN(n)].next(r, &m, maxSet)
			}
		}
	default:
		return nil, fmt.Errorf("mix: unknown kind %q (known: %s, %s, %s)", m.Kind, MixZipf, MixAgent, MixTenants)
	}
	return out, nil
}
