package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/host/router"
)

// The budget of a shutdown past its deadline. serve promises to exit
// within --shutdown-timeout plus one second (issue 9, 2.5); these two
// spend at most 700 ms of that second and leave the rest to closing the
// backend plugins and the runtime.
const (
	// abortGrace bounds how long the requests ended at the deadline take
	// to write their error and close their connections.
	abortGrace = 300 * time.Millisecond
	// killGrace bounds how long the router then takes to abort its model
	// starts and see every model process exit.
	killGrace = 400 * time.Millisecond
)

// shutdown stops serving within timeout, in order:
//
//  1. the router fails queued requests at once and stops models as they go
//     idle, while srv stops accepting and waits for the requests in flight;
//  2. at the deadline, the proxy ends the requests still in flight (Abort:
//     an SSE error event, or 503) and their connections close;
//  3. the router, whose context ends only now, aborts the model starts
//     still running; killing model processes before step 2 would cut the
//     streams with a 502 instead of the shutdown's error.
//
// Hitting the deadline is an orderly shutdown, not an error: shutdown
// returns an error only when connections or model processes outlived
// their grace. A value on now (a second SIGINT or SIGTERM: an operator
// who will not wait) brings the deadline to that moment.
func shutdown(srv *http.Server, h *proxy.Server, r *router.Router, timeout time.Duration, now <-chan os.Signal, log *slog.Logger) error {
	deadline := time.Now().Add(timeout)
	dctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	why := fmt.Sprintf("the shutdown timeout of %s ran out", timeout)
	var urgent atomic.Bool
	go func() {
		select {
		case sig := <-now:
			urgent.Store(true)
			log.Warn("second signal: ending the requests in flight and stopping the models now", "signal", sig.String())
			cancel()
		case <-dctx.Done():
		}
	}()
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	routerDone := make(chan error, 1)
	go func() { routerDone <- r.Shutdown(rctx) }()

	var errs []error
	if srv.Shutdown(dctx) != nil {
		if urgent.Load() {
			why = "a second signal asked to stop now"
		}
		n := h.Abort(why)
		log.Warn("ending the requests still in flight", "requests", n, "why", why)
		gctx, gcancel := context.WithTimeout(context.Background(), abortGrace)
		err := srv.Shutdown(gctx)
		gcancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("connections still open %s after their requests were ended; closed", abortGrace))
			_ = srv.Close()
		}
	}
	select {
	case err := <-routerDone:
		return errors.Join(append(errs, err)...)
	case <-dctx.Done():
	}
	rcancel()
	select {
	case <-routerDone:
		// Its error is rctx's, which we cancelled; the run loop has ended
		// unless r.Done says otherwise.
	case <-time.After(killGrace):
	}
	select {
	case <-r.Done():
		log.Info("model starts aborted", "why", why)
	default:
		errs = append(errs, fmt.Errorf("model processes still stopping %s after the shutdown timeout of %s", killGrace, timeout))
	}
	return errors.Join(errs...)
}
