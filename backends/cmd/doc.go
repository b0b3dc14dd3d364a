// Package cmdbackend is the "cmd" backend: it runs any OpenAI-compatible
// server command line (llama-server, vLLM, a script) as a model server and
// implements plugins.Backend for it.
//
// It owns its servers' processes: each runs in its own process group with
// CUDA_VISIBLE_DEVICES from the spec's devices, is watched for readiness on
// its check endpoint, is stopped with SIGTERM then SIGKILL (or the spec's
// cmdStop), and never outlives the plugin: the kernel kills it when the
// plugin dies (Pdeathsig, Linux) and Close kills every process group on
// shutdown. It knows nothing of the host, GPUs or scheduling.
package cmdbackend
