package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
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
}
