// Command group is Loadout's default swapper (eviction) policy: llama-swap's
// groups. It is built to a WebAssembly module (GOOS=wasip1 GOARCH=wasm go
// build -buildmode=c-shared) and embedded in the loadout binary as the
// built-in swapper "group".
//
// Models are put in named groups. When a model must load, a running model
// is evicted (stopped first) when
//
//   - it is in the same group, and that group has swap: true (only one of
//     its members runs at a time); or
//   - it is in another group, the loading model's group has
//     exclusive: true, and the other group is not persistent.
//
// So loading a model of a non-exclusive group leaves every other group
// alone, and a persistent group is never evicted by another group. Models
// in no group form an implicit group named "(default)" with swap and
// exclusive on: with no groups configured, one model runs at a time.
//
// The swapper places nothing on devices (the host does) and never evicts a
// model that is serving: the scheduler waits for it to go idle.
//
// For a GPU job that may evict idle models (sdk.JobPlanner), it takes free
// GPUs first, then GPUs whose every model is ready, idle, unpinned and
// outside a persistent group, lowest index first: a persistent group is
// evicted by nothing, a job included.
//
// # Settings
//
//	routing:
//	  router:
//	    name: group
//	    settings:
//	      groups:
//	        chat:
//	          swap: true        # one member at a time (default true)
//	          exclusive: true   # loading a member evicts other groups (default true)
//	          persistent: false # other groups never evict this one (default false)
//	          members: [llama-8b, qwen-7b]
//	        embeddings:
//	          swap: false
//	          exclusive: false
//	          persistent: true
//	          members: [bge-small]
//
// Every group needs members (model ids; that each names a model of the
// configuration is the config's check, which knows the ids and aliases).
// A group may not be named "(default)", the implicit group; a model listed
// twice, or in two groups, and an unknown key are errors at load, reported
// through sdk/settings with the path of the offending setting
// (groups.chat.members[1]), which the host turns into the file:line:col of
// the configuration (llama-swap's rules).
package main
