package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// routerCall is one call of a router-mode client and what came back:
// the status, and the body reduced to what a client reads (success, or
// the error's code and type; a model's status value for GET /models).
type routerCall struct {
	method, path, body string
}

func routerAnswer(t *testing.T, base string, c routerCall) string {
	t.Helper()
	req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct {
		Success *bool `json:"success"`
		Error   *struct {
			Code int    `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
		Data []struct {
			ID     string `json:"id"`
			Status struct {
				Value string `json:"value"`
			} `json:"status"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", c.method, c.path, resp.StatusCode, b)
	}
	out := strconv.Itoa(resp.StatusCode)
	switch {
	case v.Success != nil:
		out += " success=" + strconv.FormatBool(*v.Success)
	case v.Error != nil:
		out += " error " + strconv.Itoa(v.Error.Code) + " " + v.Error.Type
	default:
		for _, m := range v.Data {
			if m.ID == "tiny" || m.ID == "small" {
				out += " " + m.ID + "=" + m.Status.Value
			}
		}
	}
	return out
}

// routerIDs are the model ids of a router-mode GET /models, sorted.
func routerIDs(t *testing.T, base string) []string {
	t.Helper()
	resp, err := http.Get(base + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range v.Data {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestRouterMode_ModelsDir_ServesEndToEnd: loadout serve --models-dir
// alone (a directory of GGUF fixtures, one a split-model subdirectory)
// with a preset's [*] flags serves a chat request by loading the model
// through the llamaserver backend (the real llama-server where built,
// else the shim on llama.cpp).
func TestRouterMode_ModelsDir_ServesEndToEnd(t *testing.T) {
	bin, _ := llamaServerBinary(t)
	dir := requireLlamaCpp(t)
	models := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "tiny.gguf"), filepath.Join(models, "tiny.gguf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(models, "small"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "small.gguf"), filepath.Join(models, "small", "small.gguf")); err != nil {
		t.Fatal(err)
	}
	preset := filepath.Join(t.TempDir(), "presets.ini")
	if err := os.WriteFile(preset, []byte("[*]\nc = 256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startLlamaCpp(t, "", "--models-dir", models, "--models-preset", preset, "--llama-server", bin)
	if got := routerIDs(t, s.base); !slices.Equal(got, []string{"small", "tiny"}) {
		t.Fatalf("GET /models ids %v, want [small tiny]", got)
	}
	if code, body := s.post("/v1/chat/completions", llamaChat("tiny", 8, false)); code != 200 || !strings.Contains(body, `"completion_tokens"`) {
		t.Fatalf("chat tiny: %d %s", code, body)
	}
	if _, running := s.get("/running"); !strings.Contains(running, `"tiny"`) {
		t.Fatalf("/running = %s, want tiny", running)
	}
}

// TestRouterMode_SameAnswersAsLlamaServer: the same router-mode client
// calls against llama-server --models-dir and against Loadout (the same
// GGUF files, run by the llamaserver backend) get the same answers: the
// listing with each model's status, loads, unloads, and the errors for a
// model already running, not running or unknown.
func TestRouterMode_SameAnswersAsLlamaServer(t *testing.T) {
	bin, real := llamaServerBinary(t)
	if !real {
		t.Skip("needs llama.cpp's llama-server (LOADOUT_LLAMA_SERVER) for the router-mode side")
	}
	t.Setenv("LOADOUT_LLAMA_BINARY", bin)
	dir := requireLlamaCpp(t)
	models := t.TempDir()
	for _, m := range []string{"tiny", "small"} {
		if err := os.Symlink(filepath.Join(dir, m+".gguf"), filepath.Join(models, m+".gguf")); err != nil {
			t.Fatal(err)
		}
	}
	port := lowFreePort(t, 1)
	ls := exec.Command(bin, "--models-dir", models, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--threads", "1", "-c", "256")
	ls.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ls.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-ls.Process.Pid, syscall.SIGKILL)
		_ = ls.Wait()
	})
	lsBase := "http://127.0.0.1:" + strconv.Itoa(port)
	eventually(t, "llama-server's router to answer", func() bool {
		resp, err := http.Get(lsBase + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	lo := startLlamaCpp(t, "../../testdata/llamacpp/llamaserver.yaml")

	calls := []routerCall{
		{"GET", "/models", ""},
		{"POST", "/models/load", `{"model":"tiny"}`},
		{"GET", "/models", ""},
		{"POST", "/models/load", `{"model":"tiny"}`},
		{"POST", "/models/unload", `{"model":"small"}`},
		{"POST", "/models/unload", `{"model":"nope"}`},
		{"POST", "/models/load", `{"model":"nope"}`},
		{"POST", "/models/unload", `{"model":"tiny"}`},
	}
	// Loadout given the same directory llama-server was lists the same
	// model ids (before the calls below load anything into llama-server).
	dirLo := startServer(t, "", "--models-dir", models, "--llama-server", bin)
	if got, want := routerIDs(t, dirLo.base), routerIDs(t, lsBase); !slices.Equal(got, want) {
		t.Errorf("GET /models ids: Loadout --models-dir %v, llama-server --models-dir %v", got, want)
	}

	lsEvents, loEvents := followModelsSSE(t, lsBase), followModelsSSE(t, lo.base)
	for _, c := range calls {
		want := routerAnswer(t, lsBase, c)
		if c.method == "GET" && strings.Contains(want, "loading") {
			// llama-server's load answers before its instance is up; a
			// client polls the listing until the status says loaded.
			eventually(t, "llama-server's model to load", func() bool {
				want = routerAnswer(t, lsBase, c)
				return !strings.Contains(want, "loading")
			})
		}
		got := routerAnswer(t, lo.base, c)
		if got != want {
			t.Errorf("%s %s %s: Loadout %q, llama-server %q", c.method, c.path, c.body, got, want)
		}
	}
	// GET /models/sse told both clients the same story of tiny: its load
	// and its unload (llama-server repeats "loading" with its progress).
	want := modelEvents(t, lsEvents, "tiny", "status_change unloaded exit 0")
	if got := modelEvents(t, loEvents, "tiny", "status_change unloaded exit 0"); !slices.Equal(got, want) {
		t.Errorf("GET /models/sse for tiny: Loadout %q, llama-server %q", got, want)
	}
}

// followModelsSSE reads base's GET /models/sse until the test ends and
// sends each event as "MODEL EVENT STATUS [exit N]": what a router-mode
// client switches on.
func followModelsSSE(t *testing.T, base string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/models/sse", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("GET %s/models/sse: %d", base, resp.StatusCode)
	}
	out := make(chan string, 64)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Model, Event string
				Data         struct {
					Status   string
					ExitCode *int `json:"exit_code"`
				}
			}
			if json.Unmarshal([]byte(data), &ev) != nil {
				out <- "not JSON: " + data
				continue
			}
			sig := ev.Model + " " + ev.Event + " " + ev.Data.Status
			if ev.Data.ExitCode != nil {
				sig += " exit " + strconv.Itoa(*ev.Data.ExitCode)
			}
			select {
			case out <- sig:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// modelEvents reads events until model's last (EVENT STATUS ...), and
// returns model's, each run of one event given once.
func modelEvents(t *testing.T, events <-chan string, model, last string) []string {
	t.Helper()
	var got []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case sig := <-events:
			rest, ok := strings.CutPrefix(sig, model+" ")
			if !ok {
				continue
			}
			if len(got) == 0 || got[len(got)-1] != rest {
				got = append(got, rest)
			}
			if rest == last {
				return got
			}
		case <-timeout:
			t.Fatalf("no %q event for %s; had %q", last, model, got)
		}
	}
}
