// Package proxy is Loadout's HTTP face: everything that comes in over HTTP
// and everything that goes out to a model server.
//
// It owns:
//
//   - the OpenAI endpoints (/v1/chat/completions, /v1/completions,
//     /v1/embeddings, /v1/responses, the rerank family, audio, images): it
//     finds the model a request names (JSON body, multipart form or ?model=),
//     resolves aliases against the catalog, strips Loadout's extension fields
//     (x_priority, x_client_id), applies useModelName and the model's
//     filters (llama-swap's stripParams, setParams, setParamsByID), in one
//     rewrite pass over the body, made only when one of those is needed;
//   - asking the router for the model (Router.Acquire) and reverse-proxying
//     the request to the granted upstream with httputil.ReverseProxy, SSE
//     streamed without buffering, and releasing the grant exactly once when
//     the response is done, whatever way it ends;
//   - forwarding a peer's model (Config.Peers, llama-swap's peers:) through
//     the same reverse proxy, after host/peers chose the peer, on a
//     transport with the peer's timeouts; a peer that is down or fails
//     answers with an error naming it: one whose answer does not begin
//     within its timeouts.responseHeader (504), or whose 200 is not what
//     the endpoint returns (answer.go, 502), fails, and each failure is
//     reported to the peer's passive health;
//   - llama-swap's loading state (sendLoadingState): a streaming chat request
//     that must wait gets its SSE response early, with progress chunks, and
//     the upstream's stream continues in the same response;
//   - errors as OpenAI-shaped JSON with the right status, or as an SSE error
//     event once a stream has started;
//   - llama-swap's operational endpoints (/health, /running, /unload,
//     /api/models/unload, /upstream/{model}/...), Loadout's admin API
//     (/api/models, /api/policies, /api/peers) and Prometheus metrics
//     (/metrics, on a registry of its own);
//   - API-key checks, the request-body limit, request ids and one log line
//     per request.
//
// It must not touch scheduling state: whether a model can serve, must load,
// must wait or must fail is the router's (and its policies') decision, asked
// through the Router interface and never second-guessed or cached here. It
// knows upstreams only as the URL a Grant carries (or a peer's, which
// host/peers chose), and processes, GPUs and policies not at all. Graceful shutdown belongs to the http.Server that
// serves a Server; every handler here ends when its request's context ends.
// Past the shutdown's deadline, Server.Abort ends the requests still in
// flight with an error their clients can read (503, or an SSE error event).
package proxy
