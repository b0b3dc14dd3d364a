// Package llamaserver is the "llamaserver" backend: it runs llama.cpp's
// llama-server for a GGUF model and implements plugins.Backend for it.
//
// It owns two things: turning a model's options (see Backend) into a
// llama-server command line, and predicting the model's memory from the GGUF
// file's metadata (weights by tensor type, plus the KV cache). Process
// management (process groups, CUDA_VISIBLE_DEVICES, readiness on /health,
// the stderr tail, stop and kill) is the cmd backend's, which it drives with
// the command line it builds. It knows nothing of the host, GPUs or
// scheduling.
//
// Readiness is the cmd backend's rule (see cmdbackend): the port the host
// gives llama-server must be free when it is launched, /health must answer
// 200 from a listener that is not an older process outside the server's
// process group (llama-server binds the port itself), and a server that
// exits while starting (for example "couldn't bind HTTP server socket")
// fails the start with its exit error and stderr tail, whatever answers on
// the port.
package llamaserver
