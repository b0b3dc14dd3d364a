package plugins

import "strconv"

// CUDAVisibleDevices returns the value of CUDA_VISIBLE_DEVICES that shows a
// process exactly devices, in the order given ("0,2"); "" for none. The
// indices are NVML's, which are CUDA's only with CUDA_DEVICE_ORDER=PCI_BUS_ID
// (CUDA's default order puts the fastest device first): use CUDAEnv.
func CUDAVisibleDevices(devices []int) string {
	b := make([]byte, 0, 2*len(devices))
	for i, d := range devices {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(d), 10)
	}
	return string(b)
}

// CUDAEnv returns the environment a process placed on devices needs (a
// model server started by a backend, or a job), the one rule for both:
// CUDA_DEVICE_ORDER=PCI_BUS_ID (so CUDA numbers devices as NVML does) and
// CUDA_VISIBLE_DEVICES. For no devices it returns nil: a model with no
// placement inherits the environment rather than being shown no GPU.
func CUDAEnv(devices []int) []string {
	if len(devices) == 0 {
		return nil
	}
	return []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=" + CUDAVisibleDevices(devices)}
}
