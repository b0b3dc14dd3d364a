package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// gpuView is GET /api/gpus.
type gpuView struct {
	Source  string `json:"source"`
	Devices []struct {
		Index   int    `json:"index"`
		Total   uint64 `json:"total"`
		Leased  uint64 `json:"leased"`
		Holders []struct {
			Owner string `json:"owner"`
			Bytes uint64 `json:"bytes"`
		} `json:"holders"`
	} `json:"devices"`
}

func (s *server) gpus() gpuView {
	s.t.Helper()
	_, body := s.get("/api/gpus")
	var v gpuView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		s.t.Fatalf("/api/gpus: %v: %s", err, body)
	}
	return v
}

// holders returns the lease holders of every device, sorted.
func (v gpuView) holders() []string {
	var out []string
	for _, d := range v.Devices {
		for _, h := range d.Holders {
			out = append(out, h.Owner)
		}
	}
	slices.Sort(out)
	return out
}

const gib = 1 << 30

// On one simulated 24 GiB device: loads pack until the device is full, the
// next load evicts the least recently used idle model, a pinned model and a
// busy model are never evicted, and a model that can never fit gets a clear
// error at once.
func TestServe_GPUPackingAndEviction(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/gpu.yaml")
	for _, m := range []string{"pin4", "m6", "m8"} { // 4 + 6 + 8 = 18 GiB: all fit
		s.mustChat(m)
	}
	pids := map[string]int{}
	for _, m := range []string{"pin4", "m6", "m8"} {
		pids[m] = onePid(t, m)
	}
	v := s.gpus()
	if v.Source != "declared" || len(v.Devices) != 1 || v.Devices[0].Leased != 18*gib {
		t.Fatalf("/api/gpus after packing: %+v", v)
	}

	s.mustChat("m8")  // m6 is now the least recently used
	s.mustChat("m10") // 10 GiB: 6 free, so one idle model goes: m6
	eventually(t, "m6 to be evicted", func() bool { return !alive(pids["m6"]) })
	if !alive(pids["pin4"]) || !alive(pids["m8"]) {
		t.Fatal("a pinned or more recently used model was evicted")
	}
	if got := s.gpus().holders(); !slices.Equal(got, []string{"m10", "m8", "pin4"}) {
		t.Fatalf("lease holders %v", got)
	}

	// m8 busy with a slow stream; m6 (6 GiB, 2 free) must evict m10, not m8.
	resp, err := http.Post(s.base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m8","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"slow"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil { // the stream has begun: m8 is busy
		t.Fatal(err)
	}
	s.mustChat("m6")
	if !alive(pids["m8"]) || !alive(pids["pin4"]) {
		t.Fatal("a busy or pinned model was evicted")
	}
	if got := s.gpus().holders(); !slices.Equal(got, []string{"m6", "m8", "pin4"}) {
		t.Fatalf("lease holders %v", got)
	}

	code, body := s.post("/v1/chat/completions", chat("big", false))
	if code != 503 || !strings.Contains(body, "needs 30") {
		t.Fatalf("a model that can never fit: %d %s", code, body)
	}
}

// A model larger than one device is split across two, with a lease on
// each, and its server sees both in CUDA_VISIBLE_DEVICES.
func TestServe_GPUSplitAcrossDevices(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/gpu-split.yaml")
	s.mustChat("llama-120")
	v := s.gpus()
	var sum uint64
	for _, d := range v.Devices {
		if len(d.Holders) != 1 || d.Holders[0].Owner != "llama-120" {
			t.Fatalf("device %d holders %+v, want llama-120", d.Index, d.Holders)
		}
		sum += d.Leased
	}
	if sum != 120*gib {
		t.Fatalf("leased %d bytes in all, want 120 GiB", sum)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", onePid(t, "llama-120")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(env), "CUDA_VISIBLE_DEVICES=0,1\x00") {
		t.Fatalf("the split model's server does not see both devices")
	}
	if !strings.Contains(string(env), "CUDA_DEVICE_ORDER=PCI_BUS_ID\x00") {
		t.Fatalf("CUDA_VISIBLE_DEVICES without CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA's numbering may differ from NVML's")
	}
}

// Pinned models that cannot all fit at once are a start-up error.
func TestServe_PinnedModelsMustFit(t *testing.T) {
	dir := t.TempDir()
	cfg := dir + "/pinned.yaml"
	yaml := "gpus: [{name: sim0, memory: 8GiB}]\nmodels:\n" +
		"  a: {backend: sim, vram: 6GiB, pinned: true}\n  b: {backend: sim, vram: 6GiB, pinned: true}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(loadoutBin, "serve", "--config", cfg, "--listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pinned models") {
		t.Fatalf("serve with too many pinned models: err=%v\n%s", err, out)
	}
}

// With the default router (group, llama-swap's, which weighs no memory),
// a model that needs more than every GPU holds gets a 507 saying it can
// never load — not a retryable 503 "cannot be placed now" whose reason
// only the server's log knew.
func TestServe_AModelLargerThanTheBoxIsA507WithTheDefaultRouter(t *testing.T) {
	cfg := "gpus: [{name: sim0, memory: 8GiB}]\nmodels:\n  big:\n    backend: sim\n    options: {load_time: 10ms, vram: 12GiB}\n"
	s := startServer(t, writeConfig(t, t.TempDir(), cfg))
	code, body := s.post("/v1/chat/completions", chat("big", false))
	if code != http.StatusInsufficientStorage || !strings.Contains(body, "needs 12 GiB of GPU memory; the box's GPUs hold 8 GiB together: it can never load") {
		t.Fatalf("a model larger than the box: %d %s, want a 507 saying it can never load", code, body)
	}
}
