// Package gpu owns Loadout's view of GPU memory: which devices there are and
// how much memory each has free (the Inventory), who holds what on which
// device (the Ledger), and where a new model goes (Place, Split). How much
// a model will need is the configuration's `vram:`, else its backend's
// estimate (serve asks the plugin), until measured. Every figure is in
// bytes.
//
// # Inventories
//
// An Inventory reads devices and per-process memory. NVML (nvml.go) reads
// the NVIDIA driver through github.com/NVIDIA/go-nvml, which opens
// libnvidia-ml.so.1 at run time; it needs cgo and Linux, and a binary built
// without cgo simply has no NVML. Declared (declared.go) is a set of devices
// from the config (`gpus: [{name: sim0, memory: 24GiB}]`) with no driver
// behind them: simulated devices for the sim backend, or a box whose driver
// cannot be read. Open picks NVML when it initialises and finds at least one
// device, else the declared devices, else none, and logs which and why.
//
// # Free memory and leases
//
// The Ledger records leases: bytes on specific devices held by an owner (a
// model id or a job id). A lease is granted only if it fits, so the ledger
// never over-commits a device. A device's free memory is
//
//	min(driver-reported free, total − leased − margin)
//
// because drivers report free memory late: a model that has just started
// has not allocated yet, and one that has just stopped has not given its
// memory back (Ollama's scheduler takes the same minimum, in
// updateFreeSpace). The margin is a per-device reserve no lease may take.
// A declared device has no driver: it reports all its memory free, and the
// ledger's accounting (total − leased − margin) is the whole truth.
//
// Ledger.Reserve is the one call a swap needs: it releases the leases of
// the models being evicted, places the target (on the devices a swapper
// chose, or where Place says) and leases its memory, atomically. The
// evicted models' processes are still stopping at that moment, so the
// driver's free figure is credited with what their leases held; WaitFree
// then waits, before the target starts, until the driver really reports
// that memory free.
//
// A GPU job takes whole devices (jobs.go): Ledger.AcquireDevices leases
// all of each device's leasable memory, only on devices no one holds, so a
// job and a model never share a GPU; Leases marks such holders Kind "job".
//
// Once a model is loaded its measured usage (Inventory.ProcessMemory over
// the model server's pids) replaces the estimate: Ledger.Resize, with
// Rescale to spread a measured total over the lease's devices.
//
// # What it must not do
//
// The package has no goroutines of its own and knows nothing of models,
// requests or the run loop: host/router decides when to lease, release and
// measure, and host/proxy shows Ledger.Leases at GET /api/gpus. Only nvml.go
// touches go-nvml, so every other package builds and tests without cgo or a
// GPU.
package gpu
