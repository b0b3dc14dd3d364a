package plugins

import (
	"slices"
	"testing"
)

func TestCUDAVisibleDevices(t *testing.T) {
	cases := []struct {
		devices []int
		want    string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{2, 0, 11}, "2,0,11"},
	}
	for _, tc := range cases {
		if got := CUDAVisibleDevices(tc.devices); got != tc.want {
			t.Errorf("CUDAVisibleDevices(%v) = %q, want %q", tc.devices, got, tc.want)
		}
	}
	if env := CUDAEnv(nil); env != nil {
		t.Errorf("CUDAEnv(nil) = %q, want nil", env)
	}
	if env := CUDAEnv([]int{0, 1}); !slices.Equal(env, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0,1"}) {
		t.Errorf("CUDAEnv = %q", env)
	}
}
