package gpu

import (
	"context"
	"fmt"
	"time"
)

// WaitFree backoff: the first poll is immediate, then the delay doubles from
// waitFirst to waitMax. Drivers typically give memory back 0.5–1.5 s after
// a process exits (Ollama's waitForVRAMRecovery measures the same), so a
// short first delay catches the quick cases and the cap keeps a slow one
// from polling the driver more than four times a second. Variables so
// tests can shorten them.
var (
	waitFirst = 10 * time.Millisecond
	waitMax   = 250 * time.Millisecond
)

// WaitFree waits until inv reports at least want bytes free on device, as
// after an eviction: the driver reports a stopped process's memory free
// late, and a model server started too early finds too little and fails
// or falls back to the CPU. It polls with exponential backoff (10 ms
// doubling to 250 ms), not a fixed sleep, and returns the last free figure
// in bytes. It gives up when ctx ends, with an error that wraps ctx.Err()
// and says how much was free; bound it (Ollama gives up after 5 s and
// starts anyway, which is reasonable: the ledger already accounts for the
// memory). An inventory error or an unknown device (ErrUnknownDevice) ends
// it at once. A declared device reports all its memory free, so it returns
// at once.
func WaitFree(ctx context.Context, inv Inventory, device int, want uint64) (uint64, error) {
	delay := waitFirst
	var timer *time.Timer
	for {
		devs, err := inv.Devices()
		if err != nil {
			return 0, fmt.Errorf("gpu %d: waiting for %s free: %w", device, FormatBytes(want), err)
		}
		dev, ok := find(devs, device)
		if !ok {
			return 0, fmt.Errorf("%w %d", ErrUnknownDevice, device)
		}
		if dev.Free >= want {
			return dev.Free, nil
		}
		if timer == nil {
			timer = time.NewTimer(delay)
			defer timer.Stop()
		} else {
			timer.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return dev.Free, fmt.Errorf("gpu %d: the driver reports %s free, want %s: %w",
				device, FormatBytes(dev.Free), FormatBytes(want), ctx.Err())
		case <-timer.C:
		}
		delay = min(2*delay, waitMax)
	}
}
