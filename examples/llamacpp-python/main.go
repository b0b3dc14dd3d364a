// Command llamacpp-python is a Loadout backend plugin for llama-cpp-python's
// OpenAI-compatible server (python3 -m llama_cpp.server): an example of a
// backend written out of tree, against the protocol module
// (github.com/loadout-dev/loadout/plugins) alone. docs/BACKENDS.md walks
// through it.
//
// Build it and name the binary in a Loadout configuration:
//
//	go build -o llamacpp-python .
//
//	models:
//	  tiny:
//	    backend: ./llamacpp-python
//	    options:
//	      model: /models/tiny.gguf   # required: the GGUF file
//	      n_ctx: 512                 # context size, tokens (default 512)
//	      n_gpu_layers: 0            # layers offloaded to the GPU (default 0; -1: all)
//	      n_threads: 1               # CPU threads (default: the server's)
//	      python: python3            # the interpreter that has llama_cpp (default python3)
//	      extra_args: []             # more server flags, one word each
//
// Check it with `loadout backend check ./llamacpp-python`.
package main

import "github.com/loadout-dev/loadout/plugins"

func main() {
	plugins.Serve(New(plugins.Logger()))
}
