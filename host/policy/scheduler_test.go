package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

func wantCalls(t *testing.T, f *fakeEffects, want ...string) {
	t.Helper()
	if !slices.Equal(f.calls, want) {
		t.Errorf("effects:\n got %q\nwant %q", f.calls, want)
	}
	f.calls = nil
}

func TestScheduler_ServesReadyModel(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	fx := newFakeEffects(model("a", sdk.StateReady))
	s := newScheduler(t, r, "echo", "", fx)
	if err := s.OnRequest(sdk.RequestEvent{Now: 1, ID: 7, Model: "a"}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, fx, "grant_serve 7 a")
	if err := s.OnRequest(sdk.RequestEvent{Now: 2, ID: 8, Model: "nope"}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, fx, "grant_error 8 1 no model nope")
	if st := s.Status(); !st.Healthy || st.Instantiations != 1 || st.Crashes != 0 || st.Kind != sdk.KindScheduler || st.Name != "echo.wasm" {
		t.Errorf("status %+v", st)
	}
}

// TestScheduler_PlansThroughSwapper covers the nested call: the scheduler's
// plan import goes through sdk.Effects.Plan to a Wasm swapper while the
// scheduler's own call is in progress.
func TestScheduler_PlansThroughSwapper(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	fx := newFakeEffects(model("a", sdk.StateReady), model("b", sdk.StateReady), model("c", sdk.StateStopped))
	fx.swapper = newSwapper(t, r, `{"max_running": 2}`, fx)
	s := newScheduler(t, r, "echo", "", fx)

	for id := sdk.RequestID(1); id <= 2; id++ {
		if err := s.OnRequest(sdk.RequestEvent{Now: 1, ID: id, Model: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	wantCalls(t, fx, "start_swap c evict=[a] devices=[]", "set_queue_position 1 0", "set_queue_position 2 0")
	if err := s.OnSwapDone(sdk.SwapDoneEvent{Now: 2, Model: "c"}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, fx, "grant_serve 1 c", "grant_serve 2 c")
	if err := s.OnServeDone(sdk.ServeDoneEvent{Now: 3, ID: 1, Model: "c"}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, fx)
}

func TestScheduler_CancelAndSwapFailure(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	fx := newFakeEffects(model("c", sdk.StateStopped))
	s := newScheduler(t, r, "echo", "", fx)
	for id := sdk.RequestID(1); id <= 3; id++ {
		if err := s.OnRequest(sdk.RequestEvent{ID: id, Model: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.OnCancel(sdk.CancelEvent{ID: 2, Model: "c"}); err != nil {
		t.Fatal(err)
	}
	fx.calls = nil
	if err := s.OnSwapDone(sdk.SwapDoneEvent{Model: "c", Err: "exit status 1: CUDA out of memory"}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, fx, "grant_error 1 5 exit status 1: CUDA out of memory", "grant_error 3 5 exit status 1: CUDA out of memory")
}

func TestScheduler_UnloadTickShutdown(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	var models []sdk.ModelInfo
	for i := range 200 { // a snapshot larger than the SDK's first 4 KiB read buffer: the retry path
		st := sdk.StateStopped
		if i%2 == 0 {
			st = sdk.StateReady
		}
		models = append(models, model(fmt.Sprintf("model-%03d", i), st))
	}
	fx := newFakeEffects(models...)
	s := newScheduler(t, r, "echo", `{"greeting": "hello from init"}`, fx)
	if !slices.Contains(fx.logs, "INFO: hello from init") {
		t.Errorf("settings did not reach init: logs %q", fx.logs)
	}
	if err := s.OnUnload(sdk.UnloadEvent{Now: 5, Models: []string{"model-000", "model-002"}, Reason: sdk.UnloadTTL}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, fx, "stop_processes [model-000 model-002]")
	if err := s.OnTick(sdk.TickEvent{Now: 6, Changed: []string{"model-004"}}); err != nil {
		t.Fatal(err)
	}
	last := fx.logs[len(fx.logs)-1]
	if !strings.HasPrefix(last, "INFO: tick now=6 changed=[model-004] models=200 gpus=1 running=[model-000 model-002") {
		t.Errorf("tick log %q", last)
	}
	if err := s.OnRequest(sdk.RequestEvent{ID: 9, Model: "model-001"}); err != nil {
		t.Fatal(err)
	}
	fx.calls = nil
	if err := s.OnShutdown(sdk.ShutdownEvent{Now: 7, Reason: "SIGTERM"}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, fx, "grant_error 9 4 shutting down: SIGTERM")
}

// TestScheduler_StatusErrorKeepsInstance: status 1 (the policy returned an
// error) is an ordinary error naming the policy; the instance stays.
func TestScheduler_StatusErrorKeepsInstance(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	spec := miniPolicy()
	spec.bodies["on_request"] = statusBody(wire.StatusError)
	m := compile(t, r, "mini.wasm", spec.bytes())
	s, err := r.NewScheduler(context.Background(), m, nil, newFakeEffects())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		err = s.OnRequest(sdk.RequestEvent{ID: 1, Model: "a"})
		var ce *CrashError
		if err == nil || errors.As(err, &ce) || err.Error() != "policy mini.wasm: on_request: "+miniErrText {
			t.Fatalf("got %v", err)
		}
	}
	if err := s.OnTick(sdk.TickEvent{}); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.Instantiations != 1 || st.Crashes != 0 || !st.Healthy || st.LastError != "policy mini.wasm: on_request: "+miniErrText {
		t.Errorf("status %+v", st)
	}
}

// TestScheduler_EventTooLarge: an event larger than the guest's in-buffer
// is refused before the call; the instance stays.
func TestScheduler_EventTooLarge(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	spec := miniPolicy()
	spec.inCap = 64
	m := compile(t, r, "mini.wasm", spec.bytes())
	s, err := r.NewScheduler(context.Background(), m, nil, newFakeEffects())
	if err != nil {
		t.Fatal(err)
	}
	err = s.OnRequest(sdk.RequestEvent{ID: 1, Model: strings.Repeat("x", 100)})
	if err == nil || !strings.Contains(err.Error(), "policy mini.wasm: on_request: event of 130 bytes exceeds the policy's 64-byte input buffer") {
		t.Fatalf("got %v", err)
	}
	if err := s.OnRequest(sdk.RequestEvent{ID: 2, Model: "a"}); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.Instantiations != 1 || st.Crashes != 0 {
		t.Errorf("status %+v", st)
	}
}

// TestScheduler_ReentrantCallRefused: an sdk.Effects that calls back into
// the scheduler during its own call gets an error, not a corrupted guest.
func TestScheduler_ReentrantCallRefused(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	fx := newFakeEffects(model("a", sdk.StateReady))
	s := newScheduler(t, r, "echo", "", fx)
	var inner error
	fx.onGrant = func() { inner = s.OnTick(sdk.TickEvent{}) }
	if err := s.OnRequest(sdk.RequestEvent{ID: 1, Model: "a"}); err != nil {
		t.Fatal(err)
	}
	if inner == nil || !strings.Contains(inner.Error(), "policy echo.wasm: on_tick called while a call into the same policy is in progress") {
		t.Errorf("re-entrant call: %v", inner)
	}
	fx.onGrant = nil
	if err := s.OnRequest(sdk.RequestEvent{ID: 2, Model: "a"}); err != nil {
		t.Fatal(err)
	}
}

func TestScheduler_Closed(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	s := newScheduler(t, r, "echo", "", newFakeEffects())
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.OnTick(sdk.TickEvent{}); err == nil || err.Error() != "policy echo.wasm: closed" {
		t.Errorf("after Close: %v", err)
	}
	if s.Status().Healthy {
		t.Error("closed scheduler reports healthy")
	}
}

// Closing the runtime while a module compiles (serve compiles its fallback
// policies in the background, and may shut down meanwhile) waits for the
// compilation instead of closing wazero under it, which panics; a Compile
// after Close fails with a clear error.
func TestRuntime_CloseDuringCompile(t *testing.T) {
	wasm := guest(t, "echo")
	r, err := NewRuntime(context.Background(), Options{CacheDir: t.TempDir()}) // cold: the compile takes a while
	if err != nil {
		t.Fatal(err)
	}
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		close(started)
		_, err := r.Compile(context.Background(), "echo.wasm", wasm)
		done <- err
	}()
	<-started
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && !strings.Contains(err.Error(), "runtime is closed") {
		t.Fatalf("the compile under way: %v", err)
	}
	if _, err := r.Compile(context.Background(), "echo.wasm", wasm); err == nil || !strings.Contains(err.Error(), "runtime is closed") {
		t.Fatalf("a compile after Close: %v", err)
	}
}
