package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/loadout-dev/loadout/host/sim"
)

// TestServe_RecordTrace: serve --record-trace writes what it served as a
// trace, in arrival order, with the model server's token counts (or the
// documented estimates), completes it on SIGTERM, and simulate replays it.
func TestServe_RecordTrace(t *testing.T) {
	const config = "../../testdata/e2e/record.yaml"
	path := filepath.Join(t.TempDir(), "traffic.csv")
	s := startServer(t, config, "--record-trace", path)

	// Each recorded request has its own max_tokens, so its row is found by
	// its output tokens. The sim server counts prompt tokens as words.
	type want struct {
		model            string
		prompt, priority int
		client           string
	}
	wants := map[int]want{}
	chatBody := func(model, content string, maxTokens int, extra string) string {
		return fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":%q}]%s}`, model, maxTokens, content, extra)
	}
	mustPost := func(path, body string) {
		if code, resp := s.post(path, body); code != http.StatusOK {
			t.Errorf("POST %s %s: %d %s", path, body, code, resp)
		}
	}
	// stream reads a streamed chat to its end and returns its content chunks.
	stream := func(body string) int {
		resp, err := http.Post(s.base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		defer resp.Body.Close()
		n := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"content":"`) && !strings.Contains(sc.Text(), `"content":""`) {
				n++
			}
		}
		return n
	}

	// The first request, by alias, with Loadout's fields: arrival 0.
	mustPost("/v1/chat/completions", chatBody("gpt", "one two three", 5, `,"x_priority":2,"x_client_id":"alice"`))
	wants[5] = want{"chat", 3, 2, "alice"}

	// Five at once, over both models, streamed and not.
	var wg sync.WaitGroup
	wg.Go(func() {
		if n := stream(chatBody("chat", "a b c d", 6, `,"stream":true,"stream_options":{"include_usage":true}`)); n != 6 {
			t.Errorf("stream with usage: %d chunks, want 6", n)
		}
	})
	// A stream without usage: output is its chunks, the prompt 16 bytes / 4.
	wg.Go(func() {
		if n := stream(chatBody("chat", "abcdefghijklmnop", 7, `,"stream":true`)); n != 7 {
			t.Errorf("stream without usage: %d chunks, want 7", n)
		}
	})
	wg.Go(func() { mustPost("/v1/completions", `{"model":"chat","prompt":"x y","max_tokens":8}`) })
	wg.Go(func() { mustPost("/v1/chat/completions", chatBody("embed", "k l m n o", 9, "")) })
	wg.Go(func() { mustPost("/v1/embeddings", `{"model":"embed","input":["p q r","s"]}`) })
	wg.Wait()
	wants[6] = want{"chat", 4, 0, ""}
	wants[7] = want{"chat", 4, 0, ""}
	wants[8] = want{"chat", 2, 0, ""}
	wants[9] = want{"embed", 5, 0, ""}
	wants[0] = want{"embed", 4, 0, ""}

	// Not recorded: another endpoint family, and a model nobody serves.
	mustPost("/upstream/chat/v1/chat/completions", chatBody("chat", "unrecorded", 11, ""))
	if code, _ := s.post("/v1/chat/completions", chatBody("nope", "x", 12, "")); code != http.StatusNotFound {
		t.Errorf("unknown model: %d, want 404", code)
	}

	// A selector's request names the model it picked; Anthropic's
	// Messages API and llama-server's native /completion (which the sim
	// server does not serve: a failed request is recorded too) are
	// recorded as the others.
	mustPost("/v1/chat/completions", chatBody("pick", "s t", 14, ""))
	wants[14] = want{"chat", 2, 0, ""}
	mustPost("/v1/messages", `{"model":"chat","max_tokens":16,"messages":[{"role":"user","content":"m n o"}]}`)
	wants[16] = want{"chat", 3, 0, ""}
	if code, _ := s.post("/completion", `{"model":"chat","prompt":"w x","max_tokens":17}`); code == http.StatusOK {
		t.Errorf("POST /completion to the sim server: 200, want its refusal")
	}
	wants[17] = want{"chat", 1, 0, ""}

	mustPost("/v1/chat/completions", chatBody("chat", "z", 10, ""))
	wants[10] = want{"chat", 1, 0, ""}
	// Ollama's API is recorded as the OpenAI request it became.
	mustPost("/api/chat", `{"model":"chat","stream":false,"options":{"num_predict":13},"messages":[{"role":"user","content":"u v"}]}`)
	wants[13] = want{"chat", 2, 0, ""}

	// In flight at SIGTERM: shutdown lets it finish, and its row is
	// written before serve exits.
	resp, err := http.Post(s.base+"/v1/chat/completions", "application/json",
		strings.NewReader(chatBody("chat", "last one", 60, `,"stream":true,"stream_options":{"include_usage":true}`)))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), `"content":"`) {
	}
	streamed := make(chan string, 1)
	go func() {
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		resp.Body.Close()
		streamed <- b.String()
	}()
	wants[60] = want{"chat", 2, 0, ""}
	s.stop()
	if rest := <-streamed; !strings.Contains(rest, "[DONE]") {
		t.Fatalf("the stream in flight at SIGTERM did not finish:\n%s", rest)
	}
	if !strings.Contains(s.log(), `msg="trace recorded"`) {
		t.Errorf("no 'trace recorded' line in the log")
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recorded, _ := os.ReadFile(path)
	t.Logf("recorded:\n%s", recorded)
	rows, err := sim.ReadTrace(path, f) // also checks that arrivals ascend
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(wants) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(wants), rows)
	}
	if rows[0].Arrival != 0 || rows[0].OutputTokens != 5 {
		t.Errorf("first row %+v, want the first request at arrival 0", rows[0])
	}
	if rows[len(rows)-3].OutputTokens != 10 || rows[len(rows)-2].OutputTokens != 13 || rows[len(rows)-1].OutputTokens != 60 {
		t.Errorf("last rows %+v, want the three last requests in order", rows[len(rows)-3:])
	}
	for _, r := range rows {
		w, ok := wants[r.OutputTokens]
		if !ok {
			t.Errorf("unexpected row %+v", r)
			continue
		}
		delete(wants, r.OutputTokens)
		if r.Model != w.model || r.PromptTokens != w.prompt || int(r.Priority) != w.priority || r.Client != w.client {
			t.Errorf("row %+v, want model %s, %d prompt tokens, priority %d, client %q", r, w.model, w.prompt, w.priority, w.client)
		}
	}

	// The recording replays.
	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(loadoutBin, "simulate", "--config", config, "--trace", path, "--json", out)
	cmd.Env = append(os.Environ(), "LOADOUT_E2E_START_PORT="+strconv.Itoa(startPort()))
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("simulate --trace %s: %v\n%s", path, err, msg)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Runs []struct{ Requests, Completed, Errors int } `json:"runs"`
	}
	if err := json.Unmarshal(raw, &report); err != nil || len(report.Runs) != 1 {
		t.Fatalf("simulate's report: %v\n%s", err, raw)
	}
	if r := report.Runs[0]; r.Requests != len(rows) || r.Completed != len(rows) || r.Errors != 0 {
		t.Errorf("simulate replayed %+v, want all %d requests completed", r, len(rows))
	}
}

func TestServe_RecordTraceUnwritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "traffic.csv")
	cmd := exec.Command(loadoutBin, "serve", "--listen", "127.0.0.1:0", "--config", "../../testdata/e2e/record.yaml", "--record-trace", path)
	cmd.Env = append(os.Environ(), "LOADOUT_E2E_START_PORT="+strconv.Itoa(startPort()), "XDG_DATA_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--record-trace") || !strings.Contains(string(out), "no-such-dir") {
		t.Fatalf("serve with an unwritable --record-trace: %v, want a startup error naming it:\n%s", err, out)
	}
}
