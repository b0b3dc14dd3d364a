package sim

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Workload is one generated trace under testdata/traces: a window of one
// of the Azure 2023 traces with models assigned by a Mix.
type Workload struct {
	File   string        // the output's name, under testdata/traces
	Source string        // the Azure file, under shared/traces/azure-llm-2023
	Window time.Duration // the first Window of the source
	Mix    Mix
}

// Workloads are the traces the policies are measured on; `go generate
// ./host/sim` writes them, and a test checks that the files match what the
// generator makes.
var Workloads = []Workload{
	{File: "conv-zipf8-5m.csv", Source: "AzureLLMInferenceTrace_conv.csv", Window: 5 * time.Minute,
		Mix: Mix{Kind: MixZipf, Seed: 1, Models: modelNames(8)}},
	{File: "code-agent6-5m.csv", Source: "AzureLLMInferenceTrace_code.csv", Window: 5 * time.Minute,
		Mix: Mix{Kind: MixAgent, Seed: 2, Models: modelNames(6)}},
}

func modelNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("m%d", i+1)
	}
	return out
}

// Generate reads w's source from azureDir and returns the trace file's
// bytes.
func (w Workload) Generate(azureDir string) ([]byte, error) {
	f, err := os.Open(filepath.Join(azureDir, w.Source))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reqs, err := ReadAzure(w.Source, f, w.Window)
	if err != nil {
		return nil, err
	}
	if reqs, err = Assign(reqs, w.Mix); err != nil {
		return nil, fmt.Errorf("%s: %w", w.File, err)
	}
	var b bytes.Buffer
	tw := NewTraceWriter(&b)
	for _, q := range reqs {
		if err := tw.Write(q); err != nil {
			return nil, err
		}
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
