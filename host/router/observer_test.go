package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// recordingObserver writes what it hears as lines on a channel, so tests
// wait for the lines they expect instead of sleeping.
type recordingObserver struct {
	lines chan string
}

func newRecordingObserver() *recordingObserver {
	return &recordingObserver{lines: make(chan string, 1024)}
}

func (o *recordingObserver) emit(format string, args ...any) {
	select {
	case o.lines <- fmt.Sprintf(format, args...):
	default: // a test that stops reading must not block the loop
	}
}

func (o *recordingObserver) ModelChanged(s ModelStatus) {
	o.emit("model %s %s in_flight=%d queued=%d loading=%d", s.Model, s.State, s.InFlight, s.Queued, s.Loading)
}
func (o *recordingObserver) Unloading(models []string, reason string) {
	o.emit("unloading %v %s", models, reason)
}
func (o *recordingObserver) SwapStarted(s SwapInfo) {
	o.emit("swap %s evict=%v cold=%t policy=%s", s.Target, s.Evict, s.Cold, s.Policy)
}
func (o *recordingObserver) SwapEnded(s SwapInfo) {
	o.emit("swapped %s err=%q", s.Target, s.Err)
}
func (o *recordingObserver) PolicyFailed(role, policy, event string, err error) {
	o.emit("policy failed %s %s %s", role, event, policy)
}
func (o *recordingObserver) PolicyHandedOver(role string) { o.emit("handover %s", role) }

// await reads lines until every one of want has been seen, in order;
// other lines in between are skipped.
func (o *recordingObserver) await(t *testing.T, want ...string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	var seen []string
	for len(want) > 0 {
		select {
		case line := <-o.lines:
			seen = append(seen, line)
			if line == want[0] {
				want = want[1:]
			}
		case <-timeout:
			t.Fatalf("observer: still waiting for %q; heard:\n%v", want, seen)
		}
	}
}

// The observer hears a load, a queued caller, a swap with its evictions
// and an operator's unload, in the order they happen.
func TestRouter_Observer_HearsSwapsQueueAndUnload(t *testing.T) {
	obs := newRecordingObserver()
	h := newHarness(t, harnessOpts{observer: obs})
	ga := h.acquire("a").wait(t)
	h.world.expect(t, "starting a", "ready a")
	obs.await(t,
		"swap a evict=[] cold=true policy=builtin:fifo",
		"swapped a err=\"\"",
		"model a ready in_flight=1 queued=0 loading=0")
	cb := h.acquire("b")
	cb.held(t, false)
	obs.await(t, "model b stopped in_flight=0 queued=1 loading=0")
	ga.Release()
	h.world.expect(t, "stopped a", "starting b", "ready b")
	obs.await(t, "swap b evict=[a] cold=true policy=builtin:fifo", "swapped b err=\"\"")
	cb.wait(t).Release()
	if err := h.r.Unload(context.Background(), UnloadOptions{Models: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	h.world.expect(t, "stopped b")
	obs.await(t, "unloading [b] unload", "model b stopped in_flight=0 queued=0 loading=0")
}

// A router without an observer still runs (the nop observer).
func TestRouter_Observer_NoneConfigured(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
	if got := h.status("a").State; !slices.Contains([]string{"ready"}, got) {
		t.Fatalf("a is %s", got)
	}
}

// On the warm path the observer compares only the model the event changed
// (observeOnly), and still hears every change of its in-flight count.
func TestObserver_WarmPathChangesAreHeard(t *testing.T) {
	obs := newRecordingObserver()
	h := newHarness(t, harnessOpts{observer: obs})
	h.admit(t, "a")
	g1 := h.acquire("a").wait(t) // granted by the loop itself
	g2 := h.acquire("a").wait(t)
	obs.await(t, "model a ready in_flight=1 queued=0 loading=0", "model a ready in_flight=2 queued=0 loading=0")
	g1.Release()
	g2.Release()
	obs.await(t, "model a ready in_flight=1 queued=0 loading=0", "model a ready in_flight=0 queued=0 loading=0")
	if h.admitted("a") == 0 {
		t.Fatal("a is no longer admitted: the requests did not take the warm path")
	}
}

// failingSwapper fails every plan with err.
type failingSwapper struct{ err error }

func (f failingSwapper) Plan(sdk.PlanRequest) (sdk.Plan, error) { return sdk.Plan{}, f.err }
func (failingSwapper) OnSwapStart(sdk.SwapStartEvent) error     { return nil }

// namedErr is a policy's error that names the policy it came from, as
// host/policy's errors do.
type namedErr struct{ name string }

func (e namedErr) Error() string      { return "policy " + e.name + ": plan: no room" }
func (e namedErr) PolicyName() string { return e.name }

// A failed policy call names the policy that failed: the name its error
// carries (a fallback's own failure names the fallback), else the
// configured policy of its role.
func TestRouter_Observer_PolicyFailureNamesThePolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"unnamed error: the configured swapper (the harness names it test)", errors.New("no room"), "policy failed swapper plan test"},
		{"named error: its policy", fmt.Errorf("wrapped: %w", namedErr{"fallback.wasm"}), "policy failed swapper plan fallback.wasm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := newRecordingObserver()
			h := newHarness(t, harnessOpts{observer: obs, newSwap: func(sdk.Host) (SwapperPolicy, error) {
				return failingSwapper{tc.err}, nil
			}})
			h.acquire("a").waitErr(t)
			obs.await(t, tc.want)
		})
	}
}
