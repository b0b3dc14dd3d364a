package proxy

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
)

// TestConcurrencyLimit_QueuesBeyondTheLimit: a request over a model's
// concurrencyLimit waits in the queue, its position reported, and is
// served when a slot frees; it is not refused.
func TestConcurrencyLimit_QueuesBeyondTheLimit(t *testing.T) {
	e := newEnv(t, envOpts{})
	held := make(chan int)
	go func() {
		resp, _ := e.do(request{path: "/v1/chat/completions", body: `{"model":"d","messages":[]}`, headers: map[string]string{"X-Test-Mode": "hold"}})
		held <- resp.StatusCode
	}()
	e.world.waitHolding(t, "d") // d's one slot is taken
	progress := make(chan router.Progress, 16)
	e.rec.reportProgress(progress)
	second := make(chan echo)
	go func() { second <- e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"d","messages":[]}`}) }()
	if p := awaitProgress(t, progress); p.Position != 1 {
		t.Fatalf("progress %+v, want queued at 1", p)
	}
	e.world.releaseOne(t)
	if code := <-held; code != http.StatusOK {
		t.Errorf("held request ended with %d", code)
	}
	if ec := <-second; ec.Server != "d" {
		t.Errorf("the queued request was answered by %q", ec.Server)
	}
}

// TestConcurrencyLimit_ExclusiveGroupUnderLoad is issue 9 item 2.6: many
// concurrent requests over models that exclude each other, each with a
// small concurrencyLimit. Those that joined a model's load beyond its limit
// used to get 429 once it was ready; now every one is served, since the
// queue (1024) is never full.
func TestConcurrencyLimit_ExclusiveGroupUnderLoad(t *testing.T) {
	e := newEnv(t, envOpts{limits: map[string]uint32{"a": 2, "b": 2}})
	open := e.world.gate("a")
	defer open()
	// Every request reports when the scheduler holds it: a's join a's
	// load (position 0, once), b's queue behind it (b would evict a), each
	// appended at the end (only its own position is sent).
	const perModel = 40
	progress := make(chan router.Progress, 16*perModel)
	e.rec.reportProgress(progress)
	codes := make(chan string, 2*perModel)
	var wg sync.WaitGroup
	send := func(model string) {
		wg.Go(func() {
			resp, b := e.do(request{path: "/v1/chat/completions", body: fmt.Sprintf(`{"model":%q,"messages":[]}`, model)})
			codes <- fmt.Sprintf("%s %d %s", model, resp.StatusCode, b)
		})
	}
	// One a first, held in a's gated load, so that no b can reach the
	// router before it (b would load at once and serve without queueing).
	send("a")
	awaitProgress(t, progress)
	for i := 1; i < 2*perModel; i++ {
		send([]string{"a", "b"}[i%2])
	}
	for i := 1; i < 2*perModel; i++ {
		awaitProgress(t, progress)
	}
	open() // a is ready with 40 waiters and a limit of 2
	wg.Wait()
	close(codes)
	served := 0
	for c := range codes {
		var model string
		var code int
		if _, err := fmt.Sscanf(c, "%s %d", &model, &code); err != nil || code != http.StatusOK {
			t.Errorf("request: %s", c)
			continue
		}
		served++
	}
	if served != 2*perModel {
		t.Errorf("%d of %d requests served", served, 2*perModel)
	}
}

// awaitProgress receives a queue position the scheduler reported, or fails
// the test after 10 s (a request refused instead of held reports none).
func awaitProgress(t *testing.T, ch <-chan router.Progress) router.Progress {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no request was held by the scheduler (refused at once?)")
		return router.Progress{}
	}
}
