//go:build cgo && linux

package gpu

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// These tests drive NVML through go-nvml's mock package: no GPU needed.

// fakeLib is an NVML library over devs; v2 says whether the library has
// the v2 memory query. shutdowns counts Shutdown calls.
func fakeLib(v2 bool, devs ...*mock.Device) (*mock.Interface, *int) {
	shutdowns := new(int)
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { *shutdowns++; return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
				if s == memoryInfoV2 && v2 {
					return nil
				}
				return errors.New("symbol not found: " + s)
			}}
		},
	}, shutdowns
}

// fakeDevice is a device whose v2 memory query answers *mem and *ret.
func fakeDevice(name, uuid string, mem *nvml.Memory_v2, ret *nvml.Return) *mock.Device {
	return &mock.Device{
		GetNameFunc:          func() (string, nvml.Return) { return name, nvml.SUCCESS },
		GetUUIDFunc:          func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) { return *mem, *ret },
		// Utilization: the memory's used share, so each device differs.
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			if mem.Total == 0 {
				return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.Utilization{Gpu: uint32(mem.Used * 100 / mem.Total)}, nvml.SUCCESS
		},
	}
}

func ptr[T any](v T) *T { return &v }

func logTo(buf *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(buf, nil)) }

func TestNVML_Devices(t *testing.T) {
	m0 := nvml.Memory_v2{Total: 80 * gib, Free: 70 * gib, Used: 9 * gib, Reserved: gib}
	m1 := nvml.Memory_v2{Total: 80 * gib, Free: 80 * gib}
	ok := nvml.SUCCESS
	lib, _ := fakeLib(true, fakeDevice("NVIDIA H100 80GB HBM3", "GPU-aaa", &m0, &ok), fakeDevice("NVIDIA H100 80GB HBM3", "GPU-bbb", &m1, &ok))
	n, err := NewNVML(lib, nil)
	must(t, err)
	m0.Free, m0.Used = 50*gib, 29*gib // memory is read on every call
	devs, err := n.Devices()
	must(t, err)
	want := []Device{
		{Index: 0, UUID: "GPU-aaa", Name: "NVIDIA H100 80GB HBM3", Total: 80 * gib, Free: 50 * gib, Used: 29 * gib, Utilization: ptr(36)},
		{Index: 1, UUID: "GPU-bbb", Name: "NVIDIA H100 80GB HBM3", Total: 80 * gib, Free: 80 * gib, Utilization: ptr(0)},
	}
	if !reflect.DeepEqual(devs, want) {
		t.Errorf("Devices:\n%+v\nwant\n%+v", devs, want)
	}
	if n.Source() != SourceNVML {
		t.Errorf("Source = %s", n.Source())
	}
}

// TestNVML_MemoryInfoV1: without the v2 symbol, or when the driver refuses
// it, GetMemoryInfo answers, and keeps answering.
func TestNVML_MemoryInfoV1(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v2Symbol bool
		v2Ret    nvml.Return
		v2Calls  int
	}{
		{"the library lacks the v2 symbol", false, nvml.SUCCESS, 0},
		{"the driver does not support v2", true, nvml.ERROR_NOT_SUPPORTED, 1},
		{"the driver has another struct version", true, nvml.ERROR_ARGUMENT_VERSION_MISMATCH, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ret := tc.v2Ret
			d := fakeDevice("Tesla V100", "GPU-v", &nvml.Memory_v2{}, &ret)
			d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: 16 * gib, Free: 10 * gib, Used: 6 * gib}, nvml.SUCCESS
			}
			lib, _ := fakeLib(tc.v2Symbol, d)
			n, err := NewNVML(lib, nil)
			must(t, err)
			for range 3 {
				devs, err := n.Devices()
				must(t, err)
				if devs[0].Total != 16*gib || devs[0].Free != 10*gib || devs[0].Used != 6*gib {
					t.Fatalf("Devices = %+v", devs)
				}
			}
			if got := len(d.GetMemoryInfo_v2Calls()); got != tc.v2Calls {
				t.Errorf("%d v2 calls, want %d", got, tc.v2Calls)
			}
		})
	}
}

// TestNVML_ReadError: a failed reading is logged once and the last good
// one stands in; recovery is logged once too.
func TestNVML_ReadError(t *testing.T) {
	mem := nvml.Memory_v2{Total: 24 * gib, Free: 20 * gib}
	ret := nvml.SUCCESS
	var buf bytes.Buffer
	lib, _ := fakeLib(true, fakeDevice("NVIDIA GeForce RTX 4090", "GPU-x", &mem, &ret))
	n, err := NewNVML(lib, logTo(&buf))
	must(t, err)

	ret, mem.Free = nvml.ERROR_GPU_IS_LOST, 0
	for range 3 {
		devs, err := n.Devices()
		if err != nil || devs[0].Free != 20*gib {
			t.Fatalf("Devices while failing = %+v, %v; want the last good reading", devs, err)
		}
	}
	if got := strings.Count(buf.String(), "gpu memory reading failed"); got != 1 || !strings.Contains(buf.String(), "ERROR_GPU_IS_LOST") {
		t.Errorf("want one warning naming the error; got:\n%s", buf.String())
	}
	ret, mem.Free = nvml.SUCCESS, 12*gib
	devs, err := n.Devices()
	if err != nil || devs[0].Free != 12*gib {
		t.Errorf("Devices after recovery = %+v, %v", devs, err)
	}
	if !strings.Contains(buf.String(), "gpu memory reading recovered") {
		t.Errorf("want the recovery logged; got:\n%s", buf.String())
	}
}

// TestNVML_OpenFails: NVML that cannot start, has no device, or cannot
// read a device is an error, and is shut down again.
func TestNVML_OpenFails(t *testing.T) {
	bad := nvml.ERROR_UNKNOWN
	t.Run("init", func(t *testing.T) {
		lib, _ := fakeLib(true)
		lib.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
		if _, err := NewNVML(lib, nil); err == nil || !strings.Contains(err.Error(), "ERROR_LIBRARY_NOT_FOUND") {
			t.Errorf("NewNVML: %v", err)
		}
	})
	t.Run("no devices", func(t *testing.T) {
		lib, shutdowns := fakeLib(true)
		if _, err := NewNVML(lib, nil); !errors.Is(err, errNoDevices) || *shutdowns != 1 {
			t.Errorf("NewNVML: %v, %d shutdowns", err, *shutdowns)
		}
	})
	t.Run("first reading", func(t *testing.T) {
		lib, shutdowns := fakeLib(true, fakeDevice("x", "GPU-x", &nvml.Memory_v2{}, &bad))
		if _, err := NewNVML(lib, nil); err == nil || !strings.Contains(err.Error(), "nvml device 0: memory info: ERROR_UNKNOWN") || *shutdowns != 1 {
			t.Errorf("NewNVML: %v, %d shutdowns", err, *shutdowns)
		}
	})
}

func TestNVML_ProcessMemory(t *testing.T) {
	ok := nvml.SUCCESS
	d0 := fakeDevice("a", "GPU-a", &nvml.Memory_v2{Total: 80 * gib}, &ok)
	d1 := fakeDevice("b", "GPU-b", &nvml.Memory_v2{Total: 80 * gib}, &ok)
	procs0 := []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 30 * gib}, {Pid: 200, UsedGpuMemory: 2 * gib}, {Pid: 300, UsedGpuMemory: valueNotAvailable}}
	procs1 := []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 31 * gib}}
	ret1 := nvml.SUCCESS
	d0.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs0, nvml.SUCCESS }
	d1.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs1, ret1 }
	var buf bytes.Buffer
	lib, _ := fakeLib(true, d0, d1)
	n, err := NewNVML(lib, logTo(&buf))
	must(t, err)

	ret1 = nvml.ERROR_NO_PERMISSION
	if got, err := n.ProcessMemory(); err == nil {
		t.Errorf("ProcessMemory with no good reading yet = %v, want an error", got)
	}
	ret1 = nvml.SUCCESS
	want := map[int]uint64{100: 61 * gib, 200: 2 * gib} // summed over devices; unknown usage left out
	got, err := n.ProcessMemory()
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("ProcessMemory = %v, %v; want %v", got, err, want)
	}
	ret1 = nvml.ERROR_UNKNOWN
	procs0 = nil
	for range 2 {
		if got, err := n.ProcessMemory(); err != nil || !maps.Equal(got, want) {
			t.Errorf("ProcessMemory while failing = %v, %v; want the last good %v", got, err, want)
		}
	}
	if c := strings.Count(buf.String(), "gpu process reading failed"); c != 2 { // ERROR_NO_PERMISSION, then ERROR_UNKNOWN
		t.Errorf("want one warning per distinct failure; got:\n%s", buf.String())
	}
}

// TestWaitFree_NVML: the driver gives the memory back a little at a time;
// WaitFree polls until it is all there.
func TestWaitFree_NVML(t *testing.T) {
	defer func(f, m time.Duration) { waitFirst, waitMax = f, m }(waitFirst, waitMax)
	waitFirst, waitMax = time.Microsecond, 4*time.Microsecond

	mem := nvml.Memory_v2{Total: 80 * gib, Free: 10 * gib}
	ok := nvml.SUCCESS
	d := fakeDevice("NVIDIA H100", "GPU-h", &mem, &ok)
	lib, _ := fakeLib(true, d)
	n, err := NewNVML(lib, nil)
	must(t, err)
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		mem.Free = min(mem.Free+10*gib, mem.Total) // each reading sees 10 GiB more
		return mem, nvml.SUCCESS
	}
	free, err := WaitFree(context.Background(), n, 0, 60*gib)
	if err != nil || free != 60*gib {
		t.Errorf("WaitFree = %s, %v; want 60 GiB", FormatBytes(free), err)
	}
	if calls := len(d.GetMemoryInfo_v2Calls()); calls != 1+5 { // NewNVML's reading, then 5 polls
		t.Errorf("%d readings, want 6", calls)
	}

	ctx, cancel := context.WithCancel(context.Background())
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		cancel() // the memory never comes back; the caller gives up
		return nvml.Memory_v2{Total: 80 * gib, Free: 5 * gib}, nvml.SUCCESS
	}
	if free, err := WaitFree(ctx, n, 0, 60*gib); !errors.Is(err, context.Canceled) || free != 5*gib {
		t.Errorf("WaitFree with a cancelled context = %s, %v", FormatBytes(free), err)
	}
}

// TestOpen_NVML: Open's choice with NVML itself (through the mock).
func TestOpen_NVML(t *testing.T) {
	ok := nvml.SUCCESS
	lib, _ := fakeLib(true, fakeDevice("NVIDIA H200", "GPU-h", &nvml.Memory_v2{Total: 141 * gib, Free: 140 * gib}, &ok))
	var buf bytes.Buffer
	inv := open(logTo(&buf), []DeclaredDevice{{Name: "sim0", Memory: gib}}, func(l *slog.Logger) (Inventory, error) { return NewNVML(lib, l) })
	if inv.Source() != SourceNVML || !strings.Contains(buf.String(), "names=\"NVIDIA H200\"") {
		t.Errorf("Open chose %s; log:\n%s", inv.Source(), buf.String())
	}
	empty, shutdowns := fakeLib(true)
	inv = open(logTo(&buf), []DeclaredDevice{{Name: "sim0", Memory: gib}}, func(l *slog.Logger) (Inventory, error) { return NewNVML(empty, l) })
	if inv.Source() != SourceDeclared || *shutdowns != 1 {
		t.Errorf("Open with an empty NVML chose %s (%d shutdowns)", inv.Source(), *shutdowns)
	}
}
