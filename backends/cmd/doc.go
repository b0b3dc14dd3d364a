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
//
// # Readiness: the answer must come from the server that was started
//
// A 2xx from the check endpoint alone proves only that something answers on
// the upstream's port. A start is ready when all of these hold:
//
//  1. The port the host gave the server (ModelSpec.Port) was free just before
//     the server was launched (plugins.CheckPortFree). A taken port (a second
//     Loadout's model took it while this one's was stopped) is never fought
//     over: where the port is Cmd's ${PORT} and the upstream follows it, the
//     server starts on a free port the kernel picks instead, logged, and
//     Started.Upstream names it; else the start fails at once, and nothing
//     is run.
//  2. The check endpoint answered 2xx.
//  3. On Linux, for a loopback upstream: the listening socket that answered is
//     not held only by processes outside the server's process group that are
//     older than the server (the port's listeners asked of the kernel through
//     sock_diag, or read from /proc/net/tcp{,6} where it cannot be asked;
//     their holders from /proc/PID/fd, the server's own first).
//     Such a holder is another server that was there first; the check keeps
//     polling, so the start ends with the server's own exit error (it cannot
//     bind) or times out naming the holder. A holder newer than the server is
//     accepted: servers may start helpers in other groups (docker-proxy).
//     Where the holder cannot be seen (another user's process, no /proc, a
//     remote upstream) the answer is trusted.
//  4. The server has not exited. A server that exits while starting fails
//     the start with its exit status and stderr tail, whatever answers on
//     its port.
//
// The sim and llamaserver backends run their servers through this package
// (StartServer) and get the same rule. While a server starts, every 15 s it
// is logged at info ("model server still starting": how long, the last
// check's answer, its last output line), so a load of minutes shows as it
// goes.
//
// # Sleep and wake
//
// A model's options say how its server sleeps (plugins.Sleeper): each of
// sleep, wake and wake_level_2 is a step or a list of steps, a step being
// an HTTP call to the server's own upstream ("POST /sleep?level=${level}",
// a JSON body after the path) or a command (run with the server's
// environment, not through a shell); is_sleeping is one step that says
// whether the server sleeps (an HTTP answer {"is_sleeping": bool}, or a
// command's exit status, 0 asleep and 1 awake); sleep_levels the levels
// offered (default 1). preset: vllm or preset: sglang stands for the steps
// of that server's documented API and adds the flags and environment it
// needs to a cmd that runs it (Presets); keys beside it override its steps.
// Sleep runs the steps and waits for is_sleeping, Wake runs its steps and
// waits until the check endpoint answers and is_sleeping says awake, each
// bounded by its timeout; Residency reports the record, corrected by
// is_sleeping. A model with none of these options cannot sleep: Sleep
// answers plugins.ErrNotSupported and the host stops it instead.
package cmdbackend
