package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/peers"
	"github.com/loadout-dev/loadout/host/router"
)

// apiKeyEnv is the environment variable the model commands (ps, load,
// unload, logs) take the server's API key from: one of the config's
// apiKeys (llama-swap's), unlike the jobs API's token.
const apiKeyEnv = "LOADOUT_API_KEY"

// defaultLoadWait is how long `loadout load` and `unload` wait for the
// model to be ready or stopped: a cold load of a large model takes minutes.
const defaultLoadWait = 15 * time.Minute

// modelsClient makes the client of a model command: --server, --api-key
// (default $LOADOUT_API_KEY) and --timeout.
func modelsClient(cmd *cobra.Command) *apiClient {
	c := &apiClient{}
	addClientFlags(cmd.Flags(), c, "api-key", apiKeyEnv, "an API key of the server (one of its config's apiKeys)")
	cmd.PreRun = func(cmd *cobra.Command, _ []string) { c.out = cmd.OutOrStdout() }
	return c
}

// psModel is what `loadout ps` reads of GET /api/models.
type psModel struct {
	router.ModelStatus
	Name string `json:"name,omitempty"`
}

func newPsCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List the models a running Loadout has loaded: where, VRAM, in flight, queued, TTL left",
		Long: `ps lists what a running Loadout runs, like 'ollama ps': each model that is
not stopped (--all: every model), with its state, the GPU memory it holds
(measured once loaded, else the config's or the backend's estimate; "-"
asleep: its weights are in host memory, as its state says), the
GPUs it is on, its requests in flight, the callers queued for it or waiting
on its load, and when its TTL takes it off the GPU if it stays idle (put to
sleep where an eviction would be, else stopped; "-": no TTL, or busy). It
reads GET /api/models.

On a box with peers (peers: in its configuration) the peers' models follow
as PEER/MODEL, on "peer PEER", with the state, requests in flight and
queue the peer reported at its last check ("unknown" from a server that is
not a Loadout), or "peer down" / "peer hung" while the peer does not
answer. It reads GET /api/peers.`,
		Example: `  loadout ps
  loadout ps --all --server http://gpu-box:8080`,
		Args: cobra.NoArgs,
	}
	c := modelsClient(cmd)
	cmd.Flags().BoolVarP(&all, "all", "a", false, "list stopped models too")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var out struct {
			Models []psModel `json:"models"`
		}
		if err := c.do(cmd.Context(), http.MethodGet, "/api/models", nil, &out); err != nil {
			return err
		}
		var remote struct {
			Peers []peers.Status `json:"peers"`
		}
		if err := c.do(cmd.Context(), http.MethodGet, "/api/peers", nil, &remote); err != nil {
			return err
		}
		return writePs(c.out, out.Models, remote.Peers, all, time.Now())
	}
	return cmd
}

// writePs writes ps's table of models at now, then the peers' models.
func writePs(w io.Writer, models []psModel, remote []peers.Status, all bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tVRAM\tGPUS\tIN FLIGHT\tQUEUED\tUNTIL")
	for _, m := range models {
		if !all && m.State == "stopped" {
			continue
		}
		vram := "-"
		if b := cmp.Or(m.Measured, m.VRAM); b > 0 && m.State != "asleep" {
			vram = gpu.FormatBytes(b)
		}
		gpus := "-"
		if len(m.Devices) > 0 {
			ds := make([]string, len(m.Devices))
			for i, d := range m.Devices {
				ds[i] = strconv.Itoa(d)
			}
			gpus = strings.Join(ds, ",")
		}
		until := "-"
		if !m.ExpiresAt.IsZero() {
			until = untilString(m.ExpiresAt.Sub(now))
		}
		state := m.State
		if m.SleepLevel > 0 { // asleep or waking: its level and the host memory it holds
			state = fmt.Sprintf("%s (level %d, %s host)", state, m.SleepLevel, gpu.FormatBytes(m.HostBytes))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", m.Model, state, vram, gpus, m.InFlight, m.Queued+m.Loading, until)
	}
	for _, p := range remote {
		for _, m := range p.Models {
			state := cmp.Or(m.State, "unknown")
			switch {
			case p.Hung:
				state = "peer hung"
			case p.State == peers.Down:
				state = "peer down"
			}
			if !all && state == "stopped" {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t-\tpeer %s\t%d\t%d\t-\n", m.Name, state, p.Peer, m.InFlight, m.Queued)
		}
	}
	return tw.Flush()
}

// untilString is a TTL left for people, as Ollama's ps says it
// ("4 minutes from now"), to the second.
func untilString(d time.Duration) string {
	if d <= 0 {
		return "now"
	}
	return d.Round(time.Second).String() + " from now"
}

func newLoadCmd() *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "load MODEL",
		Short: "Load a model on a running Loadout and wait until it is ready",
		Long: `load asks a running Loadout to load MODEL (an id or alias) as a request for it
would: the scheduler and swapper decide, evicting idle models or queueing as
for any request. It returns when the model is ready, or fails with the
reason (it does not fit, its server failed to start, --wait passed, or
Loadout itself stopped answering for --timeout). It is
POST /api/models/load/MODEL, the web UI's load button.`,
		Example: `  loadout load qwen-7b
  LOADOUT_API_KEY=sk-… loadout load qwen-7b --server http://gpu-box:8080`,
		Args: cobra.ExactArgs(1),
	}
	c := modelsClient(cmd)
	positiveDurationVar(cmd.Flags(), &wait, "wait", defaultLoadWait, "how long the model may take to be ready")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := c.callOK(cmd.Context(), "/api/models/load/"+url.PathEscape(args[0]), wait); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "%s is ready\n", args[0])
		return nil
	}
	return cmd
}

func newUnloadCmd() *cobra.Command {
	var wait time.Duration
	var force bool
	cmd := &cobra.Command{
		Use:   "unload [MODEL]",
		Short: "Unload a model (every model when none is given) on a running Loadout",
		Long: `unload stops MODEL (an id or alias), or every running model when none is
given, and returns once they have stopped. A model with requests in flight
stops when they end (--force: at once). It is POST /api/models/unload[/MODEL],
llama-swap's.`,
		Example: `  loadout unload qwen-7b
  loadout unload            # every model`,
		Args: cobra.MaximumNArgs(1),
	}
	c := modelsClient(cmd)
	positiveDurationVar(cmd.Flags(), &wait, "wait", defaultLoadWait, "how long the models may take to stop")
	cmd.Flags().BoolVar(&force, "force", false, "stop models with requests in flight at once, failing those requests")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		path, what := "/api/models/unload", "every model"
		if len(args) == 1 {
			path, what = path+"/"+url.PathEscape(args[0]), args[0]
		}
		if force {
			path += "?force=true"
		}
		if err := c.callOK(cmd.Context(), path, wait); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "%s unloaded\n", what)
		return nil
	}
	return cmd
}

func newLogsCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs [-f] MODEL",
		Short: "Print a model server's output, kept by a running Loadout; -f follows it",
		Long: `logs prints what MODEL's server (llama-server, vLLM, …) wrote, as the running
Loadout keeps it (the latest lines of every start, across restarts of the
server). With -f it then follows new output until interrupted; when the
server ends the stream (it stopped or restarted) or stops answering its
probes (GET /health, each within --timeout), it says so and exits
non-zero. It is GET /logs/MODEL, and /logs/stream/MODEL with -f
(llama-swap's). In place of a model, proxy is Loadout's own log and
upstream every model server's output, as in llama-swap.`,
		Example: `  loadout logs qwen-7b
  loadout logs -f qwen-7b
  loadout logs -f proxy`,
		Args: cobra.ExactArgs(1),
	}
	c := modelsClient(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow new output until interrupted")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if follow {
			return c.follow(cmd.Context(), "/logs/stream/"+url.PathEscape(args[0]), c.out)
		}
		var kept bytes.Buffer // the latest lines only: Loadout keeps a bounded tail
		if err := c.do(cmd.Context(), http.MethodGet, "/logs/"+url.PathEscape(args[0]), nil, &kept); err != nil {
			return err
		}
		if kept.Len() == 0 {
			// Said, not printed: a script reading stdout gets no output.
			fmt.Fprintf(cmd.ErrOrStderr(), "loadout: %s's server has written nothing Loadout kept: it has not run since Loadout started, or wrote no output\n", args[0])
			return nil
		}
		_, err := c.out.Write(kept.Bytes())
		return err
	}
	return cmd
}

// callOK posts to path, an admin action that answers "OK" when done, or
// {"msg": "ok"} (llama-swap's two answers), waiting up to wait (--wait)
// for it while the server answers (apiClient.await).
func (c *apiClient) callOK(ctx context.Context, path string, wait time.Duration) error {
	var body bytes.Buffer
	if err := c.await(ctx, http.MethodPost, path, &body, wait); err != nil {
		return err
	}
	var msg struct {
		Msg string `json:"msg"`
	}
	if strings.TrimSpace(body.String()) != "OK" && (json.Unmarshal(body.Bytes(), &msg) != nil || msg.Msg != "ok") {
		return fmt.Errorf("POST %s: the answer from %s is not Loadout's (is it a Loadout?): %s", path, c.server, oneLine(body.Bytes()))
	}
	return nil
}

// newConfigDefaultCmd is `loadout config default`.
func newConfigDefaultCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "default",
		Short: "Print the embedded default configuration, commented key by key, to start from",
		Long: `default prints the configuration 'loadout serve' runs with no --config: three
simulated models on one declared GPU, every key commented. Save it, edit
it, check it with 'loadout config check FILE' and serve it with
'loadout serve --config FILE'.`,
		Example: `  loadout config default > loadout.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(config.DefaultYAML())
			return err
		},
	}
}
