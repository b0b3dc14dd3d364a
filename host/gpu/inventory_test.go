package gpu

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestOpen_Scenario(t *testing.T) {
	nvmlOK := func(*slog.Logger) (Inventory, error) {
		// Any inventory stands in for NVML here; nvml_test.go tests the real one.
		return NewDeclared([]DeclaredDevice{{Name: "NVIDIA H100", Memory: 80 * gib}}), nil
	}
	nvmlAbsent := func(*slog.Logger) (Inventory, error) { return nil, errors.New("nvml init: ERROR_LIBRARY_NOT_FOUND") }
	nvmlEmpty := func(*slog.Logger) (Inventory, error) { return NewDeclared(nil), nil }
	declared := []DeclaredDevice{{Name: "sim0", Memory: 24 * gib}, {Memory: 8 * gib}}

	cases := []struct {
		name     string
		nvml     func(*slog.Logger) (Inventory, error)
		declared []DeclaredDevice
		source   string
		names    []string
		log      string
	}{
		{"NVML when it works", nvmlOK, nil, SourceDeclared, []string{"NVIDIA H100"}, "source=nvml devices=1"},
		{"NVML wins over declared devices", nvmlOK, declared, SourceDeclared, []string{"NVIDIA H100"}, "ignored_declared=2"},
		{"declared when NVML is absent", nvmlAbsent, declared, SourceDeclared, []string{"sim0", "gpu1"}, "using declared devices (simulated)"},
		{"declared when NVML has no device", nvmlEmpty, declared, SourceDeclared, []string{"sim0", "gpu1"}, "NVML found no devices"},
		{"none", nvmlAbsent, nil, SourceNone, nil, "no GPUs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			inv := open(slog.New(slog.NewTextHandler(&buf, nil)), tc.declared, tc.nvml)
			devs, err := inv.Devices()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range devs {
				names = append(names, d.Name)
			}
			if inv.Source() != tc.source || strings.Join(names, ",") != strings.Join(tc.names, ",") {
				t.Errorf("Open: source %s devices %v; want %s %v", inv.Source(), names, tc.source, tc.names)
			}
			if lines := strings.Count(buf.String(), "\n"); lines != 1 || !strings.Contains(buf.String(), tc.log) {
				t.Errorf("want one log line containing %q; got:\n%s", tc.log, buf.String())
			}
		})
	}
}

func TestDeclared(t *testing.T) {
	d := NewDeclared([]DeclaredDevice{{Name: "sim0", Memory: 24 * gib}})
	devs, _ := d.Devices()
	if len(devs) != 1 || devs[0] != (Device{Index: 0, Name: "sim0", Total: 24 * gib, Free: 24 * gib}) {
		t.Errorf("Devices = %+v", devs)
	}
	devs[0].Free = 0 // a copy: the inventory is unchanged
	if again, _ := d.Devices(); again[0].Free != 24*gib {
		t.Error("Devices returned the inventory's own slice")
	}
	if procs, err := d.ProcessMemory(); err != nil || len(procs) != 0 {
		t.Errorf("ProcessMemory = %v, %v", procs, err)
	}
}

// A declared device's utilization is unknown, not 0 and not a sentinel:
// GET /api/gpus (DeviceLeases) has no utilization_percent for it, and a
// device whose driver reports one has it.
func TestDeclared_UtilizationUnknownIsAbsent(t *testing.T) {
	devs, err := NewLedger(NewDeclared([]DeclaredDevice{{Name: "sim0", Memory: 24 * gib}}), 0).Leases()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(devs[0])
	if strings.Contains(string(b), "utilization") {
		t.Errorf("a declared device: %s", b)
	}
	pct := 0
	b, _ = json.Marshal(DeviceLeases{Utilization: &pct})
	if !strings.Contains(string(b), `"utilization_percent":0`) {
		t.Errorf("a device at 0%%: %s", b)
	}
}
