package sim

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const azureDir = "../../../shared/traces/azure-llm-2023"

func TestReadAzure(t *testing.T) {
	src := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.6805900,374,44\n" +
		"2023-11-16 18:15:50.9951690,396,109\n" +
		"2023-11-16 18:25:50.0000000,1,1\n"
	got, err := ReadAzure("a.csv", strings.NewReader(src), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Arrival != 0 || got[1].PromptTokens != 396 || got[1].OutputTokens != 109 ||
		got[1].Arrival < 4.314 || got[1].Arrival > 4.315 {
		t.Fatalf("got %+v", got)
	}
	if _, err := ReadAzure("a.csv", strings.NewReader("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n"), 0); err == nil ||
		!strings.Contains(err.Error(), "a.csv:2: TIMESTAMP") {
		t.Fatalf("bad timestamp: %v", err)
	}
}

func TestAssign_Zipf(t *testing.T) {
	reqs := make([]Request, 20000)
	m := Mix{Kind: MixZipf, Seed: 7, Models: modelNames(8)}
	a, err := Assign(reqs, m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Assign(reqs, m)
	count := map[string]int{}
	for i := range a {
		if a[i].Model != b[i].Model {
			t.Fatal("the same seed gave different models")
		}
		count[a[i].Model]++
	}
	// Zipf: each model is requested more often than the next, the first
	// far more than the last.
	for i := 1; i < 8; i++ {
		if count[m.Models[i-1]] <= count[m.Models[i]] {
			t.Fatalf("counts %v not decreasing by rank", count)
		}
	}
	if count["m1"] < 4*count["m8"] {
		t.Fatalf("counts %v: the head is not heavy", count)
	}
}

func TestAssign_Agent(t *testing.T) {
	reqs := make([]Request, 5000)
	a, err := Assign(reqs, Mix{Kind: MixAgent, Seed: 3, Models: modelNames(6)})
	if err != nil {
		t.Fatal(err)
	}
	// The model changes on most requests (the agent cycles through its
	// working set), and over the trace every model is used.
	changes, used := 0, map[string]bool{}
	for i := range a {
		used[a[i].Model] = true
		if i > 0 && a[i].Model != a[i-1].Model {
			changes++
		}
	}
	if changes < len(a)/2 || len(used) != 6 {
		t.Fatalf("%d changes in %d requests, %d models used", changes, len(a), len(used))
	}
	if _, err := Assign(reqs, Mix{Kind: "round-robin", Models: modelNames(2)}); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if _, err := Assign(reqs, Mix{Kind: MixAgent, MaxSet: 1, Models: modelNames(2)}); err == nil {
		t.Fatal("a working set of one model accepted")
	}
}

// TestAssign_AgentSets: MaxSet widens the working sets (every burst's
// distinct models, between two changes of set, number 2 to MaxSet, and
// MaxSet occurs); Shuffle draws within the set, so a model may follow
// itself, which a cycle never does.
func TestAssign_AgentSets(t *testing.T) {
	reqs := make([]Request, 20000)
	for _, shuffle := range []bool{false, true} {
		a, err := Assign(reqs, Mix{Kind: MixAgent, Seed: 4, Models: modelNames(30), MaxSet: 5, Shuffle: shuffle})
		if err != nil {
			t.Fatal(err)
		}
		repeats, widest := 0, 0
		window := map[string]bool{}
		for i := range a {
			if i > 0 && a[i].Model == a[i-1].Model {
				repeats++
			}
			// In a cycle the last five requests hold the whole set.
			if i >= 5 && !shuffle {
				clear(window)
				for _, r := range a[i-5 : i] {
					window[r.Model] = true
				}
				widest = max(widest, len(window))
			}
		}
		switch {
		case shuffle && repeats == 0:
			t.Errorf("shuffled: no model followed itself in %d requests", len(a))
		case !shuffle && repeats > len(a)/20:
			t.Errorf("cycled: %d repeats in %d requests, want only at the bursts' seams", repeats, len(a))
		case !shuffle && widest != 5:
			t.Errorf("cycled with MaxSet 5: the widest five-request window held %d models, want 5", widest)
		}
	}
}

// The workloads under testdata/traces are what the generator makes from
// the shared traces (run `go generate ./host/sim` after changing either).
func TestWorkloads_UpToDate(t *testing.T) {
	if _, err := os.Stat(azureDir); err != nil {
		t.Skipf("the shared traces are not beside the checkout: %v", err)
	}
	for _, w := range Workloads {
		want, err := w.Generate(azureDir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("../../testdata/traces", w.File))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("testdata/traces/%s is not what the generator makes (%v): run go generate ./host/sim", w.File, err)
		}
		if _, err := ReadTrace(w.File, bytes.NewReader(got)); err != nil {
			t.Errorf("%s does not read: %v", w.File, err)
		}
	}
}

// The generated production workloads have the shape they promise: the
// same seed gives the same trace; prod-3w is about 27,000 requests over
// 86 models in three weeks; a few models take most requests while dozens
// are asked for a handful of times; nights are quieter than days and
// weekends than weekdays; batch clients send bursts to one model.
func TestProduction_Shape(t *testing.T) {
	p, ok := ProductionByName("prod-3w")
	if !ok {
		t.Fatal("no prod-3w")
	}
	reqs := p.Generate()
	if again := p.Generate(); !slices.Equal(reqs, again) {
		t.Fatal("not deterministic")
	}
	if n := len(reqs); n < 25000 || n > 29000 {
		t.Fatalf("%d requests, want about 27,000", n)
	}
	perModel := map[string]int{}
	var night, day, weekend, weekday int
	burstModels := map[string]map[string]bool{}
	for i, q := range reqs {
		if i > 0 && q.Arrival < reqs[i-1].Arrival {
			t.Fatalf("request %d out of order", i)
		}
		perModel[q.Model]++
		h, d := int(q.Arrival/3600)%24, int(q.Arrival/86400)%7
		switch {
		case h < 6:
			night++
		case h >= 10 && h < 16:
			day++
		}
		if d >= 5 {
			weekend++
		} else {
			weekday++
		}
		if strings.HasPrefix(q.Client, "batch-") {
			if burstModels[q.Client] == nil {
				burstModels[q.Client] = map[string]bool{}
			}
			burstModels[q.Client][q.Model] = true
		}
	}
	if len(perModel) < 80 || len(perModel) > 86 {
		t.Fatalf("%d models asked for, want about 86", len(perModel))
	}
	counts := slices.Sorted(maps.Values(perModel))
	slices.Reverse(counts)
	top := counts[0] + counts[1] + counts[2] + counts[3] + counts[4]
	handful := 0
	for _, c := range counts {
		if c <= 60 {
			handful++
		}
	}
	if 2*top < len(reqs) || handful < 20 {
		t.Fatalf("top five models take %d of %d; %d models asked ≤ 60 times", top, len(reqs), handful)
	}
	if 4*night > day || float64(weekend)/6 > 0.5*float64(weekday)/15 { // six night hours vs six day hours; per weekend day (6) vs weekday (15)
		t.Fatalf("night %d vs day %d; weekend %d vs weekday %d", night, day, weekend, weekday)
	}
	if len(burstModels) < 20 {
		t.Fatalf("%d bursts", len(burstModels))
	}
	for c, ms := range burstModels {
		if len(ms) != 1 {
			t.Fatalf("burst %s spans models %v", c, ms)
		}
	}
}

// The committed samples and their boxes are what the generator makes
// (run `go generate ./host/sim` after changing it), and a mixed box has
// models of every class.
func TestProduction_SamplesUpToDate(t *testing.T) {
	for _, p := range Productions {
		if !strings.HasSuffix(p.Name, "-sample") {
			continue
		}
		want, err := p.Trace()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join("../../testdata/traces", p.Name+".csv")); err != nil || !bytes.Equal(got, want) {
			t.Errorf("testdata/traces/%s.csv is not what the generator makes (%v): run go generate ./host/sim", p.Name, err)
		}
		if got, err := os.ReadFile(filepath.Join("../../testdata/simulate", p.Name+".yaml")); err != nil || !bytes.Equal(got, p.Config()) {
			t.Errorf("testdata/simulate/%s.yaml is not what the generator makes (%v)", p.Name, err)
		}
		if p.Mixed {
			for _, c := range ModelClasses {
				if !bytes.Contains(p.Config(), fmt.Appendf(nil, "vram: %dGiB", c.VRAMGiB)) {
					t.Errorf("%s has no %d GiB model", p.Name, c.VRAMGiB)
				}
			}
		}
	}
}

// A drifting workload moves popularity: the models most asked for in
// its first week take far less of its last week than a fixed Zipf
// order's do (the same shape otherwise, over seeds); a model released
// during the trace is asked for by no one, bursts included, before its
// release, and by someone after it; the undrifting workloads are as
// before (TestProduction_SamplesUpToDate).
func TestProduction_Drift(t *testing.T) {
	p, ok := ProductionByName("prod-drift-3w")
	if !ok || p.Drift == 0 || p.Releases == 0 {
		t.Fatalf("no drifting prod-drift-3w: %+v", p)
	}
	// topShare is the share of the last week's requests that go to the
	// five models most asked for in the first.
	topShare := func(reqs []Request) float64 {
		first, last := map[string]int{}, map[string]int{}
		end := reqs[len(reqs)-1].Arrival
		for _, q := range reqs {
			switch {
			case q.Arrival < 7*86400:
				first[q.Model]++
			case q.Arrival >= end-7*86400:
				last[q.Model]++
			}
		}
		ms := slices.SortedFunc(maps.Keys(first), func(a, b string) int { return first[b] - first[a] })
		n, all := 0, 0
		for _, m := range ms[:5] {
			n += last[m]
		}
		for _, c := range last {
			all += c
		}
		return float64(n) / float64(all)
	}
	var drifting, fixed float64
	for seed := uint64(1); seed <= 4; seed++ {
		d, f := p, p
		d.Seed, f.Seed, f.Drift, f.Releases = seed, seed, 0, 0
		reqs := d.Generate()
		if n := len(reqs); n < 24000 || n > 30000 {
			t.Fatalf("seed %d: %d requests, want about 27,000", seed, n)
		}
		drifting += topShare(reqs)
		fixed += topShare(f.Generate())
	}
	if drifting > 0.8*fixed {
		t.Errorf("the first week's top five take %.2f of the last week drifting, %.2f fixed: popularity does not move", drifting/4, fixed/4)
	}

	reqs := p.Generate()
	pop := newPopularity(p, 1.5, p.Days*86400)
	firstAsked := map[string]float64{}
	for _, q := range reqs {
		if _, ok := firstAsked[q.Model]; !ok {
			firstAsked[q.Model] = q.Arrival
		}
	}
	released := 0
	for i, at := range pop.release {
		if at == 0 {
			continue
		}
		released++
		m := fmt.Sprintf("m%d", i+1)
		first, ok := firstAsked[m]
		if !ok || first < at {
			t.Errorf("%s released at %.0f s, first asked for at %.0f s (asked: %v)", m, at, first, ok)
		}
	}
	if released != p.Releases {
		t.Errorf("%d models released during the trace, want %d", released, p.Releases)
	}
}

// A workload of conversations (Turns) has a user's requests follow one
// another to one model, a think time apart, where a workload of lone
// requests has a user come back rarely within minutes; both keep about
// the requests they promise.
func TestProduction_Conversations(t *testing.T) {
	p, ok := ProductionByName("prod-chat-3w")
	if !ok || p.Turns <= 1 {
		t.Fatalf("no conversations in prod-chat-3w: %+v", p)
	}
	// followUps is the share of user requests that follow the same
	// user's previous one within ten minutes, to the same model.
	followUps := func(reqs []Request) float64 {
		last := map[string]Request{}
		n, users := 0, 0
		for _, q := range reqs {
			if !strings.HasPrefix(q.Client, "user-") {
				continue
			}
			users++
			if prev, ok := last[q.Client]; ok && q.Arrival-prev.Arrival < 600 && prev.Model == q.Model {
				n++
			}
			last[q.Client] = q
		}
		return float64(n) / float64(users)
	}
	lone := p
	lone.Turns = 0
	for _, w := range []Production{p, lone} {
		reqs := w.Generate()
		if n := len(reqs); n < 24000 || n > 30000 {
			t.Fatalf("turns %v: %d requests, want about 27,000", w.Turns, n)
		}
		f := followUps(reqs)
		if w.Turns > 1 && f < 0.6 || w.Turns <= 1 && f > 0.2 {
			t.Errorf("turns %v: %.2f of the user requests follow up within ten minutes", w.Turns, f)
		}
	}
}

// Every named workload is one the generator can make; a setting it
// cannot (gentraces' flags set it) is an error naming it.
func TestProduction_Check(t *testing.T) {
	for _, p := range Productions {
		if err := p.Check(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
	base, _ := ProductionByName("prod-sample")
	for name, edit := range map[string]func(*Production){
		"models":   func(p *Production) { p.Models = 0 },
		"requests": func(p *Production) { p.Days = 0 },
		"zipf":     func(p *Production) { p.ZipfS = 0.9 },
		"burst":    func(p *Production) { p.BurstP = 1 },
		"drift":    func(p *Production) { p.Drift = -0.1 },
		"releases": func(p *Production) { p.Releases = p.Models },
		"turns":    func(p *Production) { p.Turns = math.Inf(1) },
	} {
		p := base
		edit(&p)
		if err := p.Check(); err == nil || !strings.HasPrefix(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it", name, err)
		}
	}
}

// TestAssign_Tenants: chat users' requests follow the Zipf law (the most
// popular model takes the largest share of them), the agents' cycle
// through working sets (a model seldom follows itself), and the mix's
// share of chat requests moves between the two; a share outside [0, 1]
// is an error.
func TestAssign_Tenants(t *testing.T) {
	reqs := make([]Request, 20000)
	top := func(share float64) (float64, int) {
		a, err := Assign(reqs, Mix{Kind: MixTenants, Seed: 5, Models: modelNames(30), Agents: 3, ChatShare: share})
		if err != nil {
			t.Fatal(err)
		}
		n, repeats := 0, 0
		for i := range a {
			if a[i].Model == "m1" {
				n++
			}
			if i > 0 && a[i].Model == a[i-1].Model {
				repeats++
			}
		}
		return float64(n) / float64(len(a)), repeats
	}
	chat, chatRepeats := top(1)
	mixed, _ := top(0.5)
	agents, agentRepeats := top(0)
	if !(chat > mixed && mixed > agents) {
		t.Errorf("m1's share: %.3f with only chat, %.3f half chat, %.3f only agents; want it falling", chat, mixed, agents)
	}
	if agentRepeats*5 > chatRepeats {
		t.Errorf("a model followed itself %d times among agents, %d among chat users: want agents to cycle", agentRepeats, chatRepeats)
	}
	for _, share := range []float64{-0.1, 1.5} {
		if _, err := Assign(reqs, Mix{Kind: MixTenants, Models: modelNames(4), ChatShare: share}); err == nil {
			t.Errorf("chat share %g accepted", share)
		}
	}
}
