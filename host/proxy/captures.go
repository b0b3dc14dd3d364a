package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/gorilla/mux"
)

// Capture is one model request and its response as GET /api/captures/{id}
// returns it: llama-swap's ReqRespCapture, with the request id
// (X-Request-Id) for its id. Bodies are bytes (base64 in JSON, as
// llama-swap's); header values are the first of each, with credentials
// redacted.
type Capture struct {
	ID          string            `json:"id"`
	ReqPath     string            `json:"req_path"`
	ReqHeaders  map[string]string `json:"req_headers"`
	ReqBody     []byte            `json:"req_body"`
	RespHeaders map[string]string `json:"resp_headers"`
	RespBody    []byte            `json:"resp_body"`
	// Status is the status the client got. RespTruncated: the response
	// body was longer than the capture buffer and only its start is kept.
	Status        int  `json:"status"`
	RespTruncated bool `json:"resp_truncated,omitempty"`
}

// captureFields says what of an exchange a route captures (llama-swap's
// captureFields).
type captureFields uint8

const (
	captureReqHeaders captureFields = 1 << iota
	captureReqBody
	captureRespHeaders
	captureRespBody
	captureAll = captureReqHeaders | captureReqBody | captureRespHeaders | captureRespBody
)

// captureFieldsByPath is llama-swap's list of routes whose large binary
// bodies (audio, images) are not captured; every other route captures
// everything.
var captureFieldsByPath = map[string]captureFields{
	"/v1/audio/speech":         captureReqHeaders | captureReqBody | captureRespHeaders,
	"/v1/audio/voices":         captureReqHeaders | captureRespHeaders | captureRespBody,
	"/v1/audio/transcriptions": captureReqHeaders | captureRespHeaders | captureRespBody,
	"/v1/images/generations":   captureReqHeaders | captureReqBody | captureRespHeaders,
	"/v1/images/edits":         captureReqHeaders | captureRespHeaders,
	"/sdapi/v1/txt2img":        captureReqHeaders | captureReqBody | captureRespHeaders,
	"/sdapi/v1/img2img":        captureReqHeaders | captureRespHeaders,
}

// sensitiveHeaders are redacted in captures (llama-swap's list).
var sensitiveHeaders = map[string]bool{
	"authorization": true, "proxy-authorization": true, "cookie": true, "set-cookie": true, "x-api-key": true,
}

// capturing is an exchange's capture while it runs: the request's part,
// and the response body as the client gets it, kept up to limit bytes.
type capturing struct {
	c      Capture
	fields captureFields
	limit  int
	body   bytes.Buffer
}

// startCapture begins capturing r (whose body is body) when capture is
// on; the exchange then keeps what it writes (exchange.Write).
func (s *Server) startCapture(ex *exchange, r *http.Request, body []byte) {
	if s.captures == nil {
		return
	}
	f, ok := captureFieldsByPath[ex.path]
	if !ok {
		f = captureAll
	}
	cp := &capturing{fields: f, limit: int(s.captures.budget)}
	cp.c.ReqPath = ex.path
	if f&captureReqHeaders != 0 {
		cp.c.ReqHeaders = headerMap(r.Header)
	}
	if f&captureReqBody != 0 {
		cp.c.ReqBody = body
	}
	ex.capture = cp
}

// write keeps p while the response body fits the limit.
func (cp *capturing) write(p []byte) {
	if cp.fields&captureRespBody == 0 || cp.c.RespTruncated {
		return
	}
	room := cp.limit - cp.body.Len()
	if len(p) > room {
		p, cp.c.RespTruncated = p[:room], true
	}
	cp.body.Write(p)
}

// finishCapture stores ex's capture, if it has one. As llama-swap does, a
// response that is not a 200 keeps its headers but not its body.
func (s *Server) finishCapture(ex *exchange, status int) {
	cp := ex.capture
	if cp == nil || s.captures == nil {
		return
	}
	ex.capture = nil
	cp.c.ID, cp.c.Status = ex.id, status
	if cp.fields&captureRespHeaders != 0 {
		cp.c.RespHeaders = headerMap(ex.Header())
	}
	if status == http.StatusOK && cp.fields&captureRespBody != 0 {
		cp.c.RespBody = cp.body.Bytes()
	} else {
		cp.c.RespTruncated = false
	}
	s.captures.submit(ex.id, &cp.c, s.log)
}

// headerMap flattens h to its first values, credentials redacted.
func headerMap(h http.Header) map[string]string {
	m := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) == 0 {
			continue
		}
		m[k] = v[0]
		if sensitiveHeaders[strings.ToLower(k)] {
			m[k] = "[REDACTED]"
		}
	}
	return m
}

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// compressCapture encodes c as JSON and compresses it with gzip.
func compressCapture(c *Capture) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	if err := json.NewEncoder(zw).Encode(c); err != nil {
		return nil, fmt.Errorf("encoding the capture: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing the capture: %w", err)
	}
	return bytes.Clone(buf.Bytes()), nil
}

// decompressCapture is compressCapture's inverse.
func decompressCapture(data []byte) (*Capture, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var c Capture
	if err := json.NewDecoder(io.LimitReader(zr, 1<<32)).Decode(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

// captureRing keeps compressed captures by request id within a byte
// budget: adding one that does not fit drops the oldest until it does;
// one larger than the whole budget is not kept. Captures are encoded and
// compressed off the request's goroutine (submit), by one worker started
// with the first capture: a request pays a channel send, not gzip (~70 µs
// a small exchange), and a keep-alive client's next request is not held
// behind it. Safe for concurrent use.
type captureRing struct {
	mu     sync.Mutex
	budget int64 // bytes of compressed captures, at most
	used   int64
	seq    uint64
	order  []ringEntry // oldest first
	byID   map[string]ringEntry

	start   sync.Once
	queue   chan queuedCapture
	pending sync.WaitGroup // submitted and not yet added
}

// queuedCapture is a finished exchange's capture waiting to be compressed.
type queuedCapture struct {
	id  string
	c   *Capture
	log *slog.Logger
}

// captureQueue bounds the captures waiting for the worker; past it a
// capture is dropped rather than the request held.
const captureQueue = 64

// submit hands c, the capture of request id, to the worker; when the
// worker is that far behind, the capture is dropped (logged at debug).
func (c *captureRing) submit(id string, cp *Capture, log *slog.Logger) {
	c.start.Do(func() {
		c.queue = make(chan queuedCapture, captureQueue)
		go c.work()
	})
	c.pending.Add(1)
	select {
	case c.queue <- queuedCapture{id: id, c: cp, log: log}:
	default:
		c.pending.Done()
		log.Debug("capture dropped: the compressor is behind", "request_id", id)
	}
}

// work compresses and keeps the submitted captures, for the server's life.
func (c *captureRing) work() {
	for q := range c.queue {
		data, err := compressCapture(q.c)
		switch {
		case err != nil:
			q.log.Warn("capture not kept", "request_id", q.id, "err", err)
		case !c.add(q.id, data):
			q.log.Debug("capture larger than captureBuffer, not kept", "request_id", q.id, "bytes", len(data))
		}
		c.pending.Done()
	}
}

type ringEntry struct {
	id   string
	seq  uint64
	data []byte
}

func newCaptureRing(budget int64) *captureRing {
	return &captureRing{budget: budget, byID: map[string]ringEntry{}}
}

// add keeps data under id (replacing an earlier capture of the same id)
// and reports whether it fits the budget at all.
func (c *captureRing) add(id string, data []byte) bool {
	if int64(len(data)) > c.budget {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byID[id]; ok {
		c.used -= int64(len(old.data))
		delete(c.byID, id)
	}
	for c.used+int64(len(data)) > c.budget && len(c.order) > 0 {
		e := c.order[0]
		c.order[0] = ringEntry{}
		c.order = c.order[1:]
		if cur, ok := c.byID[e.id]; ok && cur.seq == e.seq {
			delete(c.byID, e.id)
			c.used -= int64(len(e.data))
		}
	}
	c.seq++
	e := ringEntry{id: id, seq: c.seq, data: data}
	c.order = append(c.order, e)
	c.byID[id] = e
	c.used += int64(len(data))
	return true
}

// get returns the capture kept under id, once the captures submitted
// before the call are kept.
func (c *captureRing) get(id string) ([]byte, bool) {
	c.pending.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[id]
	return e.data, ok
}

// size returns the bytes and the number of captures kept.
func (c *captureRing) size() (bytes int64, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used, len(c.byID)
}

// apiCapture is GET /api/captures/{id}: the capture of the request with
// that id (its X-Request-Id) as a Capture. Errors: 404 when capture is
// off or the capture is not (or no longer) kept.
func (s *Server) apiCapture(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if s.captures == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "capture_off", msg: "request capture is off (captureBuffer: 0)"})
		return
	}
	data, ok := s.captures.get(id)
	if !ok {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "capture_not_found",
			msg: fmt.Sprintf("no capture of request %s: never captured, or dropped for newer ones (captureBuffer)", echoed(id))})
		return
	}
	c, err := decompressCapture(data)
	if err != nil {
		s.writeError(w, r, &apiError{status: http.StatusInternalServerError, code: "internal_error", msg: "reading the capture: " + err.Error()})
		return
	}
	s.writeJSON(w, r, c)
}
