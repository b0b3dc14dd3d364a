package sdk

import (
	"fmt"
	"testing"
)

// NotNow is true for the refusals a scheduler waits out (a swap or a stop
// under way, a busy eviction, memory held by jobs), wrapped or not, and
// false for the ones that are a policy's mistake or final.
func TestNotNow(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{ErrSwapActive, true},
		{ErrModelBusy, true},
		{ErrHeldByJob, true},
		{fmt.Errorf("start swap: %w", ErrSwapActive), true},
		{nil, false},
		{ErrUnknownModel, false},
		{ErrUnknownRequest, false},
		{ErrNotReady, false},
		{ErrNotAllowed, false},
		{ErrBadArgument, false},
		{ErrDoesNotFit, false},
		{ErrSwapperFailed, false},
		{fmt.Errorf("other"), false},
	} {
		if got := NotNow(tc.err); got != tc.want {
			t.Errorf("NotNow(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
