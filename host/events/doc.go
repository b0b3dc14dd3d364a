// Package events is Loadout's event stream: a bounded in-memory ring of
// typed, numbered events (model state changes, swaps, queue changes,
// request summaries, policy crashes and fallbacks) and the subscriptions
// that read it, for GET /api/events and the web UI.
//
// Publishing never blocks: it stores the event in the ring and wakes
// subscribers with a non-blocking send. A subscriber that falls more than
// the ring's length behind is dropped rather than allowed to slow the
// publisher (the run loop). The package knows nothing of HTTP; host/proxy
// serves the ring as server-sent events.
package events
