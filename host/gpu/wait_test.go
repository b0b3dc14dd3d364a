package gpu

import (
	"context"
	"errors"
	"testing"
)

// A declared device reports all its memory free: nothing to wait for.
func TestWaitFree_Declared(t *testing.T) {
	inv := sim()
	free, err := WaitFree(context.Background(), inv, 1, 24*gib)
	if err != nil || free != 24*gib {
		t.Errorf("WaitFree = %d, %v; want 24 GiB at once", free, err)
	}
}

// More than the device has never comes: the context ends the wait, and the
// error says what was free.
func TestWaitFree_ContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	free, err := WaitFree(ctx, sim(), 0, 25*gib)
	if !errors.Is(err, context.Canceled) || free != 24*gib {
		t.Fatalf("WaitFree = %d, %v; want 24 GiB and context.Canceled", free, err)
	}
	if want := "gpu 0: the driver reports 24 GiB free, want 25 GiB: context canceled"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestWaitFree_UnknownDevice(t *testing.T) {
	if _, err := WaitFree(context.Background(), sim(), 7, 1); !errors.Is(err, ErrUnknownDevice) {
		t.Errorf("WaitFree on device 7: %v, want ErrUnknownDevice", err)
	}
}
