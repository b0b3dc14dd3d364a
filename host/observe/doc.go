// Package observe turns what the run loop reports (router.Observer) into
// Prometheus series and events on the event stream (host/events), and
// collects the per-device and per-policy series at scrape time.
//
// Its Observer runs on the run-loop goroutine: every method only updates
// counters and publishes to the non-blocking event ring; it never blocks,
// never calls the router, and keeps its small bookkeeping (swap start
// times, eviction reasons) to itself. Label values are bounded: model ids
// from the config, device indices, policy roles and names, and fixed sets
// of reasons and states.
package observe
