package simserver

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// defaultMaxTokens is the completion length when a request sets none.
const defaultMaxTokens = 16

// maxBody bounds a request body, in bytes.
const maxBody = 16 << 20

// Run serves the simulated model until ctx ends, then shuts down (ending open
// streams) and returns nil; it returns an error if it cannot listen or the
// options are invalid. With CrashAfterTokens set it may exit the process.
func Run(ctx context.Context, opts Options) error {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return fmt.Errorf("sim-server: %w", err)
	}
	ln := opts.Listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)))
		if err != nil {
			return fmt.Errorf("sim-server: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	s := newServer(opts)
	go s.engine.run(ctx)
	loaded := time.AfterFunc(opts.LoadTime, func() {
		s.loaded.Store(true)
		opts.Logger.Info("sim model loaded", "model", opts.Model, "load_time", opts.LoadTime.String())
	})
	defer loaded.Stop()

	srv := &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	}()
	opts.Logger.Info("sim server listening", "addr", ln.Addr().String(), "model", opts.Model,
		"vram_bytes", opts.VRAM, "tokens_per_second", opts.TokensPerSecond, "max_batch", opts.MaxBatch)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("sim-server: %w", err)
	}
	return nil
}

// server is one simulated model server.
type server struct {
	opts   Options
	engine *engine
	loaded atomic.Bool
	ids    atomic.Uint64
	// asleep is the sleep level, 0 while awake; it stays set until a wake
	// has taken its time.
	asleep atomic.Int32
	// sleepMu serialises sleeps and wakes.
	sleepMu sync.Mutex
}

func newServer(o Options) *server {
	s := &server{opts: o}
	s.engine = newEngine(o, func() {
		fmt.Fprintf(os.Stderr, "sim-server: crash_after_tokens=%d reached, exiting\n", o.CrashAfterTokens)
		os.Exit(1)
	})
	return s
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /sim/stats", s.stats)
	mux.HandleFunc("POST /sleep", s.sleep)
	mux.HandleFunc("POST /wake_up", s.wake)
	mux.HandleFunc("GET /is_sleeping", s.isSleeping)
	mux.HandleFunc("GET /v1/models", s.ready(s.models))
	mux.HandleFunc("POST /v1/chat/completions", s.ready(s.chat))
	mux.HandleFunc("POST /v1/completions", s.ready(s.completions))
	mux.HandleFunc("POST /v1/embeddings", s.ready(s.embeddings))
	mux.HandleFunc("POST /v1/messages", s.ready(s.messages))
	mux.HandleFunc("POST /v1/messages/count_tokens", s.ready(s.countMessageTokens))
	mux.HandleFunc("/", notServed)
	return mux
}

// notServed answers any other endpoint (the Responses API, rerank, …) with an OpenAI-shaped 404 that says the
// simulator does not serve it and what it does serve, rather than
// net/http's bare "404 page not found".
func notServed(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf(
		"the simulated model server (backend sim) does not serve %s %s; it serves POST /v1/chat/completions, /v1/completions, /v1/embeddings and /v1/messages, and GET /v1/models",
		r.Method, r.URL.Path))
}

// ready answers 503 while the model loads, like llama-server, and while it
// sleeps (vLLM answers errors then; the host never sends requests to a
// sleeping model).
func (s *server) ready(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.loaded.Load() {
			writeError(w, http.StatusServiceUnavailable, "unavailable_error", "Loading model")
			return
		}
		if s.asleep.Load() != 0 {
			writeError(w, http.StatusServiceUnavailable, "unavailable_error", "Model is asleep")
			return
		}
		h(w, r)
	}
}

// health answers 200 once loaded, asleep or not (as vLLM's /health does).
func (s *server) health(w http.ResponseWriter, _ *http.Request) {
	if !s.loaded.Load() {
		writeError(w, http.StatusServiceUnavailable, "unavailable_error", "Loading model")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// sleep is vLLM's POST /sleep?level=N: it releases the simulated device
// memory (/sim/stats reports 0) at once. Requests in flight finish; new
// ones are answered 503 until a wake. With SleepFails it answers 500.
func (s *server) sleep(w http.ResponseWriter, r *http.Request) {
	level, err := strconv.Atoi(r.URL.Query().Get("level"))
	switch {
	case s.opts.SleepFails:
		writeError(w, http.StatusInternalServerError, "internal_error", "sleep refused (sim-server --sleep-fails)")
		return
	case err != nil || level < 1 || level > 2:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "level must be 1 or 2")
		return
	case !s.loaded.Load():
		writeError(w, http.StatusServiceUnavailable, "unavailable_error", "Loading model")
		return
	}
	s.sleepMu.Lock()
	defer s.sleepMu.Unlock()
	if cur := s.asleep.Load(); cur != 0 && cur != int32(level) {
		writeError(w, http.StatusConflict, "invalid_request_error", fmt.Sprintf("asleep at level %d", cur))
		return
	}
	s.asleep.Store(int32(level))
	s.opts.Logger.Info("sim model asleep", "model", s.opts.Model, "level", level)
	w.WriteHeader(http.StatusOK)
}

// wake is vLLM's POST /wake_up: it takes WakeTime (level 1) or
// WakeTimeLevel2 (level 2), then serves again; at once when awake. With
// WakeHangs it never answers.
func (s *server) wake(w http.ResponseWriter, r *http.Request) {
	if s.opts.WakeHangs {
		<-r.Context().Done()
		return
	}
	s.sleepMu.Lock()
	defer s.sleepMu.Unlock()
	level := s.asleep.Load()
	d := s.opts.WakeTime
	switch level {
	case 0:
		w.WriteHeader(http.StatusOK)
		return
	case 2:
		d = s.opts.WakeTimeLevel2
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return // still asleep
	}
	s.asleep.Store(0)
	s.opts.Logger.Info("sim model awake", "model", s.opts.Model, "level", level, "wake_time", d.String())
	w.WriteHeader(http.StatusOK)
}

// isSleeping is vLLM's GET /is_sleeping.
func (s *server) isSleeping(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"is_sleeping": s.asleep.Load() != 0})
}

// simStats is the body of GET /sim/stats.
type simStats struct {
	Model           string `json:"model"`
	Loaded          bool   `json:"loaded"`
	VRAMBytes       int64  `json:"vram_bytes"`
	ActiveSequences int64  `json:"active_sequences"`
	TokensGenerated int64  `json:"tokens_generated"`
	Steps           int64  `json:"steps"`
	Pid             int    `json:"pid"`
	// SleepLevel is 0 while awake.
	SleepLevel int `json:"sleep_level"`
	// HostBytes is the host memory held because it sleeps: VRAM plus
	// Options.HostBytes at level 1, Options.HostBytes at level 2, else 0.
	HostBytes int64 `json:"host_bytes"`
}

func (s *server) stats(w http.ResponseWriter, _ *http.Request) {
	vram, host := s.opts.VRAM, int64(0)
	level := int(s.asleep.Load())
	switch level {
	case 1:
		vram, host = 0, s.opts.VRAM+s.opts.HostBytes
	case 2:
		vram, host = 0, s.opts.HostBytes
	}
	writeJSON(w, http.StatusOK, simStats{
		Model:           s.opts.Model,
		Loaded:          s.loaded.Load(),
		SleepLevel:      level,
		HostBytes:       host,
		VRAMBytes:       vram,
		ActiveSequences: s.engine.active.Load(),
		TokensGenerated: s.engine.generated.Load(),
		Steps:           s.engine.steps.Load(),
		Pid:             os.Getpid(),
	})
}

func (s *server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.opts.Model, "object": "model", "created": 0, "owned_by": "loadout-sim",
		}},
	})
}

// genRequest is the part of a chat, completions or Anthropic messages
// request the simulator uses.
type genRequest struct {
	Model string `json:"model"`
	// System is an Anthropic request's system prompt: a string or text
	// blocks, read as a message before the others.
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	// N is the choices asked for: the simulator answers one, as
	// llama-server does, and refuses more rather than answer fewer.
	N             *int `json:"n"`
	Stream        bool `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// maxTokens is the tokens to write: max_tokens, else
// max_completion_tokens, else defaultMaxTokens. Errors: outside 1 to 2^20.
func (q *genRequest) maxTokens() (int, error) {
	n := defaultMaxTokens
	if q.MaxCompletionTokens != nil {
		n = *q.MaxCompletionTokens
	}
	if q.MaxTokens != nil {
		n = *q.MaxTokens
	}
	if n < 1 || n > 1<<20 {
		return 0, fmt.Errorf("max_tokens must be between 1 and %d, got %d", 1<<20, n)
	}
	return n, nil
}

// oneChoice refuses an OpenAI request for more than one choice, as
// llama-server does, rather than answer fewer than asked.
func (q *genRequest) oneChoice() error {
	if q.N != nil && *q.N != 1 {
		return fmt.Errorf("n: the simulated server answers one choice (as llama-server does), got n=%d", *q.N)
	}
	return nil
}

// chatPrompt joins the text of the system prompt (Anthropic's) and of all
// messages; each is a string or a list of parts (OpenAI's) or content
// blocks (Anthropic's) with "text".
func (q *genRequest) chatPrompt() (string, error) {
	var b strings.Builder
	if len(q.System) > 0 && string(q.System) != "null" {
		text, ok := partsText(q.System)
		if !ok {
			return "", errors.New("system: want a string or a list of text blocks")
		}
		b.WriteString(text)
		b.WriteByte('\n')
	}
	for i, m := range q.Messages {
		text, ok := partsText(m.Content)
		if !ok {
			return "", fmt.Errorf("messages[%d].content: want a string or a list of parts", i)
		}
		b.WriteString(text)
		b.WriteByte('\n')
	}
	if len(q.Messages) == 0 {
		return "", errors.New("messages is required")
	}
	return b.String(), nil
}

// partsText is the text of content that is a string or a list of parts
// with "text"; false for anything else.
func partsText(raw json.RawMessage) (string, bool) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, true
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", false
	}
	for _, p := range parts {
		text += p.Text
	}
	return text, true
}

// messages is POST /v1/messages, Anthropic's Messages API as llama-server
// serves it: the generated text as one text block, stop_reason
// "max_tokens" and usage in input and output tokens; streamed as
// Anthropic's events (message_start, content_block_start, a
// content_block_delta a token, content_block_stop, message_delta,
// message_stop). Errors are Anthropic-shaped.
func (s *server) messages(w http.ResponseWriter, r *http.Request) {
	q, prompt, ok := readMessages(w, r)
	if !ok {
		return
	}
	n, err := q.maxTokens()
	if err != nil {
		anthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	model := s.modelOf(&q)
	ctx := r.Context()
	sq := s.begin(ctx, prompt, n)
	gen := newGenerator(s.opts.Seed, prompt)
	id := fmt.Sprintf("msg_sim%d", s.ids.Add(1))
	in := countTokens(prompt)
	message := func(content []any, stop any, out int) map[string]any {
		return map[string]any{"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
			"stop_reason": stop, "stop_sequence": nil, "usage": map[string]int{"input_tokens": in, "output_tokens": out}}
	}
	if !q.Stream {
		for range n {
			next(ctx, sq)
		}
		writeJSON(w, http.StatusOK, message([]any{map[string]any{"type": "text", "text": gen.text(n)}}, "max_tokens", n))
		return
	}
	rc := startEvents(w)
	send := func(event string, v map[string]any) error {
		v["type"] = event
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if send("message_start", map[string]any{"message": message([]any{}, nil, 0)}) != nil ||
		send("content_block_start", map[string]any{"index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) != nil {
		return
	}
	for i := range n {
		next(ctx, sq)
		if send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": gen.piece(i)}}) != nil {
			return // the client left; ctx is canceled and the loop drops the sequence
		}
	}
	_ = send("content_block_stop", map[string]any{"index": 0})
	_ = send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": "max_tokens", "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": n}})
	_ = send("message_stop", map[string]any{})
}

// countMessageTokens is POST /v1/messages/count_tokens: the prompt's
// tokens as the simulator counts them, {"input_tokens": N}.
func (s *server) countMessageTokens(w http.ResponseWriter, r *http.Request) {
	if _, prompt, ok := readMessages(w, r); ok {
		writeJSON(w, http.StatusOK, map[string]int{"input_tokens": countTokens(prompt)})
	}
}

// readMessages reads an Anthropic messages request and its prompt; false
// after answering a bad one with an Anthropic-shaped 400.
func readMessages(w http.ResponseWriter, r *http.Request) (genRequest, string, bool) {
	var q genRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&q); err != nil {
		anthropicError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return q, "", false
	}
	prompt, err := q.chatPrompt()
	if err != nil {
		anthropicError(w, http.StatusBadRequest, err.Error())
		return q, "", false
	}
	return q, prompt, true
}

// anthropicError writes an Anthropic-shaped error.
func anthropicError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": msg}})
}

// texts reads an input that is a string or a list of strings.
func texts(raw json.RawMessage, field string) ([]string, error) {
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil || len(many) == 0 {
		return nil, fmt.Errorf("%s must be a string or a non-empty list of strings", field)
	}
	return many, nil
}

// promptTexts reads a completions prompt as OpenAI's API takes it: a
// string, a list of strings, a list of token ids (one prompt) or a list
// of such lists; a prompt of token ids is read as its ids, one word each,
// so it counts as many tokens.
func promptTexts(raw json.RawMessage) ([]string, error) {
	if ps, err := texts(raw, "prompt"); err == nil {
		return ps, nil
	}
	ids := func(v []int) string {
		words := make([]string, len(v))
		for i, id := range v {
			words[i] = strconv.Itoa(id)
		}
		return strings.Join(words, " ")
	}
	var one []int
	if err := json.Unmarshal(raw, &one); err == nil && len(one) > 0 {
		return []string{ids(one)}, nil
	}
	var many [][]int
	if err := json.Unmarshal(raw, &many); err == nil && len(many) > 0 && !slices.ContainsFunc(many, func(v []int) bool { return len(v) == 0 }) {
		out := make([]string, len(many))
		for i, v := range many {
			out[i] = ids(v)
		}
		return out, nil
	}
	return nil, errors.New("prompt must be a string, a non-empty list of strings, a list of token ids or a list of such lists")
}

func (s *server) chat(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, true)
}

func (s *server) completions(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, false)
}

// generate serves a chat (chat true) or completions request. A
// completions request's prompt may be a list: each prompt is answered as
// its own sequence, batched by the decode loop, and is its own choice,
// index i for prompt i, as OpenAI's completions API answers a list.
func (s *server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	var q genRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&q); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return
	}
	n, err := q.maxTokens()
	if err == nil {
		err = q.oneChoice()
	}
	var prompts []string
	if err == nil && chat {
		var prompt string
		prompt, err = q.chatPrompt()
		prompts = []string{prompt}
	} else if err == nil {
		prompts, err = promptTexts(q.Prompt)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	model := s.modelOf(&q)
	ctx := r.Context()
	seqs := make([]*seq, len(prompts))
	gens := make([]generator, len(prompts))
	in := 0
	for i, p := range prompts {
		seqs[i] = s.begin(ctx, p, n)
		gens[i] = newGenerator(s.opts.Seed, p)
		in += countTokens(p)
	}

	e := encoding{chat: chat, model: model, created: time.Now().Unix()}
	if chat {
		e.id = fmt.Sprintf("chatcmpl-sim%d", s.ids.Add(1))
	} else {
		e.id = fmt.Sprintf("cmpl-sim%d", s.ids.Add(1))
	}
	out := n * len(prompts)
	usage := map[string]int{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}

	if !q.Stream {
		for range n {
			for _, sq := range seqs {
				next(ctx, sq)
			}
		}
		answers := make([]string, len(gens))
		for i, g := range gens {
			answers[i] = g.text(n)
		}
		writeJSON(w, http.StatusOK, e.whole(answers, usage))
		return
	}

	rc := startEvents(w)
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if chat {
		if send(e.chunk(0, map[string]any{"role": "assistant", "content": ""}, nil)) != nil {
			return
		}
	}
	for t := range n {
		for i, sq := range seqs {
			next(ctx, sq)
			if send(e.delta(i, gens[i].piece(t))) != nil {
				return // the client left; ctx is canceled and the loop drops the sequences
			}
		}
	}
	finish := "length"
	for i := range seqs {
		if send(e.chunk(i, e.emptyDelta(), &finish)) != nil {
			return
		}
	}
	if q.StreamOptions.IncludeUsage {
		u := e.chunk(0, nil, nil)
		u["choices"] = []any{}
		u["usage"] = usage
		if send(u) != nil {
			return
		}
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

// modelOf is the model q names, else the server's own.
func (s *server) modelOf(q *genRequest) string {
	if q.Model != "" {
		return q.Model
	}
	return s.opts.Model
}

// startEvents begins a 200 event stream on w and returns its controller,
// which flushes each event.
func startEvents(w http.ResponseWriter) *http.ResponseController {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return http.NewResponseController(w)
}

// begin prefills prompt (the model's prefill time) and joins the decode
// loop with a sequence of n tokens; a client that leaves meanwhile, or a
// server that stops, aborts the handler.
func (s *server) begin(ctx context.Context, prompt string, n int) *seq {
	if d := s.engine.model.Prefill(countTokens(prompt)); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			abort()
		}
	}
	sq := newSeq(ctx, n)
	if err := s.engine.submit(sq); err != nil {
		abort() // the server is stopping
	}
	return sq
}

// next waits for sq's next token; a client that leaves aborts the
// handler (the decode loop drops its sequence).
func next(ctx context.Context, sq *seq) {
	select {
	case <-sq.tokens:
	case <-ctx.Done():
		abort()
	}
}

// encoding shapes OpenAI chat and completions responses.
type encoding struct {
	chat    bool
	id      string
	model   string
	created int64
}

func (e encoding) object(stream bool) string {
	switch {
	case e.chat && stream:
		return "chat.completion.chunk"
	case e.chat:
		return "chat.completion"
	default:
		return "text_completion"
	}
}

func (e encoding) emptyDelta() map[string]any {
	if e.chat {
		return map[string]any{}
	}
	return nil
}

// delta is a streamed chunk carrying one piece of choice i's text.
func (e encoding) delta(i int, text string) map[string]any {
	if e.chat {
		return e.chunk(i, map[string]any{"content": text}, nil)
	}
	c := e.chunk(i, nil, nil)
	c["choices"] = []any{map[string]any{"index": i, "text": text, "finish_reason": nil}}
	return c
}

// chunk is a streamed chunk of choice i with a chat delta (or, for
// completions, empty text) and a finish reason.
func (e encoding) chunk(i int, delta map[string]any, finish *string) map[string]any {
	choice := map[string]any{"index": i, "finish_reason": finish}
	if e.chat {
		choice["delta"] = delta
	} else {
		choice["text"] = ""
	}
	return map[string]any{
		"id": e.id, "object": e.object(true), "created": e.created, "model": e.model,
		"choices": []any{choice},
	}
}

// whole is a non-streamed response: one choice per text, in order.
func (e encoding) whole(texts []string, usage map[string]int) map[string]any {
	choices := make([]any, len(texts))
	for i, text := range texts {
		choice := map[string]any{"index": i, "finish_reason": "length"}
		if e.chat {
			choice["message"] = map[string]any{"role": "assistant", "content": text}
		} else {
			choice["text"] = text
		}
		choices[i] = choice
	}
	return map[string]any{
		"id": e.id, "object": e.object(false), "created": e.created, "model": e.model,
		"choices": choices, "usage": usage,
	}
}

// embeddings is POST /v1/embeddings: a vector per input, as floats, or
// with encoding_format "base64" as OpenAI's API and llama-server send them
// (the float32 values little-endian, base64-encoded; the official Python
// client asks for this by default). Any other format is a 400.
func (s *server) embeddings(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Model  string          `json:"model"`
		Input  json.RawMessage `json:"input"`
		Format string          `json:"encoding_format"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&q); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return
	}
	inputs, err := texts(q.Input, "input")
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if q.Format != "" && q.Format != "float" && q.Format != "base64" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("encoding_format: want float or base64, got %q", q.Format))
		return
	}
	if q.Model == "" {
		q.Model = s.opts.Model
	}
	data := make([]any, len(inputs))
	tokens := 0
	for i, in := range inputs {
		var v any = embedding(s.opts.Seed, in)
		if q.Format == "base64" {
			v = base64Floats(v.([]float64))
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": v}
		tokens += countTokens(in)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "model": q.Model,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// base64Floats is v as OpenAI's base64 embedding encoding: each value as
// a little-endian float32, the bytes in standard base64.
func base64Floats(v []float64) string {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(f)))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes an OpenAI-shaped error.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "code": status},
	})
}

// abort ends a response the server stops (or whose client left) before
// it is complete by dropping the connection, as a killed server would:
// returning would send an empty 200, or end a stream cleanly without its
// finish chunk and [DONE], which a proxy and a client read as success.
func abort() { panic(http.ErrAbortHandler) }
