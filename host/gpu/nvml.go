//go:build cgo && linux

package gpu

import (
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML is an Inventory that reads the NVIDIA driver through NVML
// (github.com/NVIDIA/go-nvml, which opens libnvidia-ml.so.1 at run time).
// It is written against nvml.Interface, so tests drive it with go-nvml's
// mock package.
//
// Device names and UUIDs are read once, at NewNVML; memory is read on every
// call. A failed read is logged (once when a device starts failing, once
// when it recovers) and the device's last good reading is returned in its
// place, so a flaky driver call never makes a GPU disappear; only a device
// that has never been read successfully is an error. ProcessMemory does
// the same with its last good map. Calls are serialised by a mutex, so a
// hung driver call blocks other readers until NVML times out.
type NVML struct {
	lib nvml.Interface
	log *slog.Logger

	mu       sync.Mutex
	devs     []nvmlDevice
	procs    map[int]uint64 // last good ProcessMemory
	procsOK  bool
	procsErr string // the error being reported; "" while healthy
}

type nvmlDevice struct {
	h       nvml.Device
	v1      bool   // use GetMemoryInfo: the v2 query is missing or unsupported
	last    Device // last good reading; Index, UUID and Name are fixed
	ok      bool   // last holds a reading
	failing string // the error being reported; "" while healthy
}

// The memory query of NVML 11.5+ drivers: its Free and Used leave out the
// memory the driver reserves, which the v1 call counts as used.
const memoryInfoV2 = "nvmlDeviceGetMemoryInfo_v2"

// valueNotAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned long long: a
// process's memory that the driver cannot report (no permission, WDDM).
const valueNotAvailable = ^uint64(0)

// NewNVML initialises lib (nvml.New() for the real library), reads every
// device's name and UUID and a first memory reading, and returns the
// inventory. It fails, shutting NVML down again, if NVML does not
// initialise (no driver or library: nvml.ERROR_LIBRARY_NOT_FOUND), a device
// cannot be read, or there is no device.
func NewNVML(lib nvml.Interface, logger *slog.Logger) (*NVML, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml init: %v", ret)
	}
	n := &NVML{lib: lib, log: logger}
	if err := n.discover(); err != nil {
		_ = lib.Shutdown()
		return nil, err
	}
	return n, nil
}

func (n *NVML) discover() error {
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml device count: %v", ret)
	}
	if count == 0 {
		return errNoDevices
	}
	// The v2 query is called only if the loaded library has it: with
	// lazy binding, calling a symbol an old driver lacks aborts the process.
	v2 := n.lib.Extensions().LookupSymbol(memoryInfoV2) == nil
	for i := range count {
		h, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device %d: handle: %v", i, ret)
		}
		d := nvmlDevice{h: h, v1: !v2, last: Device{Index: i}}
		if name, ret := h.GetName(); ret == nvml.SUCCESS {
			d.last.Name = name
		} else {
			d.last.Name = fmt.Sprintf("gpu%d", i)
		}
		if uuid, ret := h.GetUUID(); ret == nvml.SUCCESS {
			d.last.UUID = uuid
		}
		n.devs = append(n.devs, d)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range n.devs {
		if err := n.read(&n.devs[i]); err != nil {
			return err
		}
	}
	return nil
}

// memory queries the device's memory: GetMemoryInfo_v2, falling back to
// GetMemoryInfo for good when the library has the v2 symbol but this driver
// or device does not serve it.
func (d *nvmlDevice) memory() (total, free, used uint64, ret nvml.Return) {
	if !d.v1 {
		m, ret := d.h.GetMemoryInfo_v2()
		switch ret {
		case nvml.SUCCESS:
			return m.Total, m.Free, m.Used, ret
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
			d.v1 = true
		default:
			return 0, 0, 0, ret
		}
	}
	m, ret := d.h.GetMemoryInfo()
	return m.Total, m.Free, m.Used, ret
}

// read takes a memory reading of d into d.last. n.mu is held.
func (n *NVML) read(d *nvmlDevice) error {
	total, free, used, ret := d.memory()
	if ret != nvml.SUCCESS {
		err := fmt.Errorf("nvml device %d: memory info: %v", d.last.Index, ret)
		if d.failing != err.Error() {
			d.failing = err.Error()
			n.log.Warn("gpu memory reading failed", "gpu", d.last.Index, "uuid", d.last.UUID, "err", err, "using_last_good", d.ok)
		}
		if d.ok {
			return nil
		}
		return err
	}
	if d.failing != "" {
		d.failing = ""
		n.log.Info("gpu memory reading recovered", "gpu", d.last.Index, "uuid", d.last.UUID)
	}
	d.last.Total, d.last.Free, d.last.Used = total, free, used
	d.last.Utilization = nil
	if u, ret := d.h.GetUtilizationRates(); ret == nvml.SUCCESS {
		pct := int(u.Gpu)
		d.last.Utilization = &pct
	}
	d.ok = true
	return nil
}

// Devices reads every device's memory. A device whose reading fails keeps
// its last good reading (the failure is logged); it is an error only for a
// device never read successfully.
func (n *NVML) Devices() ([]Device, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Device, len(n.devs))
	for i := range n.devs {
		if err := n.read(&n.devs[i]); err != nil {
			return nil, err
		}
		out[i] = n.devs[i].last
	}
	return out, nil
}

// ProcessMemory returns the bytes each compute process uses, summed over
// all devices, by pid. A process whose usage the driver cannot report is
// left out. If a device's process list cannot be read, the failure is
// logged and the last good map is returned (an error only if there is
// none).
func (n *NVML) ProcessMemory() (map[int]uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[int]uint64)
	for i := range n.devs {
		d := &n.devs[i]
		procs, ret := d.h.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			err := fmt.Errorf("nvml device %d: compute processes: %v", d.last.Index, ret)
			if n.procsErr != err.Error() {
				n.procsErr = err.Error()
				n.log.Warn("gpu process reading failed", "gpu", d.last.Index, "uuid", d.last.UUID, "err", err, "using_last_good", n.procsOK)
			}
			if n.procsOK {
				return maps.Clone(n.procs), nil
			}
			return nil, err
		}
		for _, p := range procs {
			if p.UsedGpuMemory != valueNotAvailable {
				out[int(p.Pid)] += p.UsedGpuMemory
			}
		}
	}
	if n.procsErr != "" {
		n.procsErr = ""
		n.log.Info("gpu process reading recovered")
	}
	n.procs, n.procsOK = out, true
	return maps.Clone(out), nil
}

// Source returns SourceNVML.
func (n *NVML) Source() string { return SourceNVML }

// Close shuts NVML down. The inventory must not be used afterwards.
func (n *NVML) Close() error {
	if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %v", ret)
	}
	return nil
}

// openNVML opens the real library.
func openNVML(logger *slog.Logger) (Inventory, error) {
	n, err := NewNVML(nvml.New(), logger)
	if err != nil {
		return nil, err
	}
	return n, nil
}
