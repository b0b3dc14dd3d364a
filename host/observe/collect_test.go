package observe

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loadout-dev/loadout/host/gpu"
)

var fortyTwo = 42

// inventory is the lowest seam below NVML (no GPU here): one device whose
// driver reports utilization and one that does not.
type inventory struct{}

func (inventory) Devices() ([]gpu.Device, error) {
	return []gpu.Device{
		{Index: 0, UUID: "GPU-aaa", Name: "NVIDIA H100 80GB HBM3", Total: 80 << 30, Free: 60 << 30, Utilization: &fortyTwo},
		{Index: 1, UUID: "GPU-bbb", Name: "NVIDIA H100 80GB HBM3", Total: 80 << 30, Free: 80 << 30},
	}, nil
}
func (inventory) ProcessMemory() (map[int]uint64, error) { return nil, nil }
func (inventory) Source() string                         { return gpu.SourceNVML }

// Utilization is exported where the driver reports it, as a 0–1 ratio;
// leases are split by the ledger's holder kind, and per-model series only
// name configured models.
func TestDeviceCollector_UtilizationAndHolders(t *testing.T) {
	ledger := gpu.NewLedger(inventory{}, 0)
	if err := ledger.Acquire("m1", map[int]uint64{0: 10 << 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.AcquireDevices("train-1", []int{1}); err != nil {
		t.Fatal(err)
	}
	c := NewDeviceCollector(ledger, []string{"m1"})
	want := `
# HELP loadout_gpu_utilization_ratio The share of the driver's last sample period in which a kernel ran (NVML), 0–1; no sample where the driver reports none (a declared device).
# TYPE loadout_gpu_utilization_ratio gauge
loadout_gpu_utilization_ratio{gpu="0"} 0.42
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "loadout_gpu_utilization_ratio"); err != nil {
		t.Fatal(err)
	}
	want = `
# HELP loadout_gpu_leased_bytes Memory leased on the device, by holder kind (model, job).
# TYPE loadout_gpu_leased_bytes gauge
loadout_gpu_leased_bytes{gpu="0",holder="job"} 0
loadout_gpu_leased_bytes{gpu="0",holder="model"} 1.073741824e+10
loadout_gpu_leased_bytes{gpu="1",holder="job"} 8.589934592e+10
loadout_gpu_leased_bytes{gpu="1",holder="model"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "loadout_gpu_leased_bytes"); err != nil {
		t.Fatal(err)
	}
}

// Names are on one info series per GPU (value 1), joined on gpu; no other
// series carries them.
func TestDeviceCollector_GPUInfo(t *testing.T) {
	c := NewDeviceCollector(gpu.NewLedger(inventory{}, 0), nil)
	want := `
# HELP loadout_gpu_info 1 for each GPU, labelled with its product name (NVML, or the config's declared name) and its NVML UUID (empty for a declared device).
# TYPE loadout_gpu_info gauge
loadout_gpu_info{gpu="0",name="NVIDIA H100 80GB HBM3",uuid="GPU-aaa"} 1
loadout_gpu_info{gpu="1",name="NVIDIA H100 80GB HBM3",uuid="GPU-bbb"} 1
# HELP loadout_gpu_memory_total_bytes The device's memory (NVML, or the config's declared size).
# TYPE loadout_gpu_memory_total_bytes gauge
loadout_gpu_memory_total_bytes{gpu="0"} 8.589934592e+10
loadout_gpu_memory_total_bytes{gpu="1"} 8.589934592e+10
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "loadout_gpu_info", "loadout_gpu_memory_total_bytes"); err != nil {
		t.Fatal(err)
	}
}
