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
package llamaserver
