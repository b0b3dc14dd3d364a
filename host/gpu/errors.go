package gpu

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors. The typed errors below match them with errors.Is.
var (
	// ErrDoesNotFit: a model cannot be placed even split across every
	// device (DoesNotFitError says by how much).
	ErrDoesNotFit = errors.New("does not fit in GPU memory")
	// ErrInsufficient: a lease does not fit on a device
	// (InsufficientError names it).
	ErrInsufficient = errors.New("not enough free GPU memory")
	// ErrUnknownDevice: a device index the inventory does not have.
	ErrUnknownDevice = errors.New("unknown GPU device")
	// ErrHeld: Acquire or Reserve for an owner that already holds a lease
	// (release it first, or Resize it).
	ErrHeld = errors.New("owner already holds a GPU lease")
	// ErrNoLease: Resize for an owner that holds no lease.
	ErrNoLease = errors.New("owner holds no GPU lease")
	// ErrConstraint: Reserve was given devices (a swapper's plan) that the
	// model's placement constraint (its gpus: and split:) does not allow.
	ErrConstraint = errors.New("devices outside the model's placement constraint")

	errNoDevices = errors.New("NVML found no devices")
)

// DoesNotFitError is Place's and Split's error when need bytes cannot be
// placed: Best is the most that could be, in bytes (split across every
// device that has memory beyond the margin, or as the model's Constraint
// allows).
type DoesNotFitError struct {
	Need uint64 // bytes asked for
	Best uint64 // bytes the best placement could hold
	// Constraint is the model's placement constraint as the configuration
	// writes it ("gpus: [1], split: never"), when it has one: Best is then
	// the most the constraint allows.
	Constraint string
}

func (e *DoesNotFitError) Error() string {
	msg := fmt.Sprintf("needs %s of GPU memory; at most %s can be placed", FormatBytes(e.Need), FormatBytes(e.Best))
	if e.Constraint != "" {
		msg += " under its " + e.Constraint
	}
	return msg
}

// Is makes errors.Is(err, ErrDoesNotFit) true.
func (e *DoesNotFitError) Is(target error) bool { return target == ErrDoesNotFit }

// InsufficientError is the Ledger's error when a lease does not fit on a
// device: it names the device and, in bytes, what the lease needs there and
// what is free.
type InsufficientError struct {
	Device int    // device index
	Need   uint64 // bytes the lease needs on Device
	Free   uint64 // bytes free on Device (see Ledger)
}

func (e *InsufficientError) Error() string {
	return fmt.Sprintf("gpu %d: needs %s, %s free", e.Device, FormatBytes(e.Need), FormatBytes(e.Free))
}

// Is makes errors.Is(err, ErrInsufficient) true.
func (e *InsufficientError) Is(target error) bool { return target == ErrInsufficient }

// FormatBytes renders a byte count n (bytes) for people: the largest binary unit that
// keeps the number at or above 1, with at most one decimal ("24 GiB",
// "1.5 GiB", "512 MiB", "100 B").
func FormatBytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		s = s[:len(s)-2]
	}
	return s + " " + units[u:u+1] + "iB"
}

// ErrHeldByJob is wrapped, with the *DoesNotFitError, by Reserve's error
// when a model does not fit now but would once the jobs holding GPUs
// release them: a reason to wait, not a misfit.
var ErrHeldByJob = errors.New("the GPU memory it needs is held by jobs")
