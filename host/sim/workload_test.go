package sim

import (
	"bytes"
	"os"
	"path/filepath"
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
