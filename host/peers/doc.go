// Package peers is Loadout's side of llama-swap's `peers:`: other servers
// (another Loadout, a llama-swap, any OpenAI-compatible endpoint) whose
// models this one serves by forwarding requests to them, so that one
// endpoint covers several boxes.
//
// It owns three things:
//
//   - the names peer models take (Lookup), llama-swap's rules: a peer's
//     model is always PEER/MODEL, matched whole (either part may contain
//     slashes), and MODEL alone reaches every peer that lists it unless
//     that plain name is some peer's full name;
//   - each peer's health (Start): a poller per peer GETs its /api/models
//     every interval, bounded by a timeout, and marks it up or down; a
//     peer that is not a Loadout (no /api/models) is up when /v1/models
//     answers, with its models' states unknown. A request that would fail
//     because a peer is down has it checked again first when its check
//     failed fast (refused, or an error answer) RecheckAfter ago or more
//     (Choose), so a peer that is back serves it. A forwarded request that
//     failed (Target.Failed) has the peer checked at once rather than at
//     the next interval. Real traffic counts too (passive health,
//     passive.go): a peer can answer its checks while its inference
//     hangs, so Peer.Failures forwarded requests in a row that fail put
//     it down for Peer.CoolDown whatever its checks say; then one request
//     is let through (half-open), and its success brings the peer back.
//     Checks start every interval, and at once after one that took
//     longer. A peer whose checks time out Peer.Failures times in a row is hung
//     (a stopped process): Target.Hung's context ends, and with it the
//     requests in flight to the peer (host/proxy), as the run loop's
//     liveness probes end a hung local server's.
//     Every change is logged once and reported (Config.OnChange);
//   - the choice, when a plain name is served by several peers and perhaps
//     a local model (Choose): a peer that is down is never chosen; of the
//     others, one whose model is ready before one that would have to load
//     it, then the fewest requests in flight (what the peer reported at its
//     last check, plus what this server sent it since, and never fewer
//     than this server has in flight there), the local model
//     first on a tie, then peers in id order. llama-swap has none of this:
//     it routes a plain name only when exactly one peer lists it, and
//     never checks a peer's health.
//
// It does not forward requests: host/proxy does, through the same
// reverse-proxy path it uses for local model servers, on a transport with
// the peer's Timeouts (llama-swap's peers timeouts:), and reports the
// requests it forwards (Target.Begin, whose end says whether the peer
// answered well) and those that failed (Target.Failed: no answer within
// the peer's responseHeader limit, a reset, a stalled stream, a 200 that
// is not an answer). It knows
// nothing of the run loop: the local model's state reaches Choose as a
// Local, from the caller.
package peers
