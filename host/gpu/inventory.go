package gpu

import (
	"log/slog"
	"strings"
)

// Device is one GPU as an Inventory reads it. Memory figures are bytes.
type Device struct {
	// Index is the device's index: NVML's (PCI bus order, the order CUDA
	// uses with CUDA_DEVICE_ORDER=PCI_BUS_ID), or the position in the
	// config's `gpus:` list for declared devices.
	Index int `json:"index"`
	// UUID is NVML's device UUID ("GPU-…"); empty for declared devices.
	UUID string `json:"uuid,omitempty"`
	// Name is the product name ("NVIDIA H100 80GB HBM3") or the declared
	// name ("sim0").
	Name string `json:"name"`
	// Total is the device's memory in bytes.
	Total uint64 `json:"total"`
	// Free is the memory the driver reports free, in bytes. Drivers report
	// it late; the Ledger takes the smaller of it and its own accounting.
	Free uint64 `json:"free"`
	// Used is the memory the driver reports in use, in bytes.
	Used uint64 `json:"used"`
	// Utilization is the percentage of the last sample period in which a
	// kernel ran (NVML's utilization rate, 0–100); nil where the driver
	// does not report it (and for declared devices): unknown, not 0.
	Utilization *int `json:"utilization_percent,omitempty"`
}

// Inventory reads the GPUs of the machine. Implementations are safe for
// concurrent use.
type Inventory interface {
	// Devices returns every device, in index order.
	Devices() ([]Device, error)
	// ProcessMemory returns, for every process using a GPU, the bytes it
	// uses summed over all devices, by pid. Pids are those of the driver's
	// PID namespace (the host's, when Loadout runs in a container).
	ProcessMemory() (map[int]uint64, error)
	// Source says where the figures come from: SourceNVML, SourceDeclared
	// or SourceNone.
	Source() string
}

// Inventory sources, the values of Inventory.Source.
const (
	SourceNVML     = "nvml"     // the NVIDIA driver, through NVML
	SourceDeclared = "declared" // devices declared in the config, simulated
	SourceNone     = "none"     // no GPU: NVML is absent and none is declared
)

// DeclaredDevice is a device declared in the config (`gpus:`), used when
// NVML is absent.
type DeclaredDevice struct {
	// Name identifies the device, e.g. "sim0".
	Name string
	// Memory is the device's memory in bytes.
	Memory uint64
}

// Open returns the machine's inventory: NVML if it initialises and finds at
// least one device, else the declared devices (simulated), else an empty
// inventory (SourceNone). It logs one line saying which it chose and why.
// The result may implement io.Closer (NVML does: it shuts NVML down).
func Open(logger *slog.Logger, declared []DeclaredDevice) Inventory {
	return open(logger, declared, openNVML)
}

// open is Open with the NVML opener as an argument, for tests.
func open(logger *slog.Logger, declared []DeclaredDevice, openNVML func(*slog.Logger) (Inventory, error)) Inventory {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	inv, err := openNVML(logger)
	if err == nil {
		devs, derr := inv.Devices()
		if derr == nil && len(devs) > 0 {
			names := make([]string, len(devs))
			for i, d := range devs {
				names[i] = d.Name
			}
			attrs := []any{"source", SourceNVML, "devices", len(devs), "names", strings.Join(names, ", "), "total", FormatBytes(sumTotal(devs))}
			if len(declared) > 0 {
				attrs = append(attrs, "ignored_declared", len(declared))
			}
			logger.Info("gpu inventory", attrs...)
			return inv
		}
		err = derr
		if err == nil {
			err = errNoDevices
		}
		if c, ok := inv.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}
	if len(declared) > 0 {
		d := NewDeclared(declared)
		devs, _ := d.Devices()
		logger.Info("gpu inventory: NVML unavailable, using declared devices (simulated)",
			"source", SourceDeclared, "devices", len(devs), "total", FormatBytes(sumTotal(devs)), "nvml", err.Error())
		return d
	}
	logger.Info("gpu inventory: no GPUs (NVML unavailable and no gpus declared)", "source", SourceNone, "nvml", err.Error())
	return &Declared{source: SourceNone}
}

func sumTotal(devs []Device) uint64 {
	var t uint64
	for _, d := range devs {
		t += d.Total
	}
	return t
}
