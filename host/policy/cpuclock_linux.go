package policy

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadID is the calling thread's id (gettid(2)).
func threadID() int { return unix.Gettid() }

// threadCPU is the CPU time thread tid of this process has used, from its
// CPU-time clock (clock_getcpuclockid(3)'s encoding of a thread's clock:
// (^tid << 3) | CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD); false if it cannot be
// read (the thread is gone).
func threadCPU(tid int) (time.Duration, bool) {
	if tid <= 0 {
		return 0, false
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(^tid<<3|6), &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
