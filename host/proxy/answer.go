package proxy

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
)

// A peer that answers 200 with something that is not an answer — an
// HTML error page from a proxy in front of it, an empty body, a JSON
// array, plain JSON to a client that asked for a stream — would reach
// the client as a success it cannot read. So a peer's 200 on an endpoint
// whose answer is known (answerKinds) is checked before it goes out, and
// cheaply: its Content-Type, and the first bytes of its body (at most
// maxAnswerPeek, read while the answer's timeout still runs, put back in
// front of the rest, so a stream is never buffered). A 200 that fails the
// check is a 502 peer_error and a failure of the peer (passive health).

// answerKind is what an endpoint's 200 is.
type answerKind uint8

const (
	answerJSON   answerKind = iota + 1 // a JSON object
	answerStream                       // a JSON object, or an SSE stream when the request asked for "stream": true
)

// answerKinds are the endpoints whose answer is checked; the others
// (audio, images) are passed through as they come.
var answerKinds = map[string]answerKind{
	"/v1/chat/completions": answerStream,
	"/v1/completions":      answerStream,
	"/v1/responses":        answerStream,
	"/v1/embeddings":       answerJSON,
	"/v1/rerank":           answerJSON,
	"/rerank":              answerJSON,
	"/v1/reranking":        answerJSON,
	"/reranking":           answerJSON,
}

// maxAnswerPeek bounds the bytes checkAnswer reads: leading whitespace,
// then the first token.
const maxAnswerPeek = 512

// sseFields are how an SSE stream's first line may begin (a comment, or
// one of the fields of the HTML standard's event stream).
var sseFields = [][]byte{[]byte(":"), []byte("data:"), []byte("event:"), []byte("id:"), []byte("retry:")}

// badAnswerError is checkAnswer's error: the peer's 200 is not what the
// endpoint returns.
type badAnswerError struct{ msg string }

func (e *badAnswerError) Error() string { return e.msg }

// checkAnswer checks a peer's 200 to a request for path (stream: it asked
// for "stream": true): for a streaming request a text/event-stream body
// whose first line is an SSE field, else an application/json body that
// is an object. It returns a *badAnswerError, or the error reading the
// first bytes failed with. resp.Body is replaced by the same bytes.
func checkAnswer(resp *http.Response, path string, stream bool) error {
	kind := answerKinds[path]
	if kind == 0 {
		return nil
	}
	want, what := "application/json", "a JSON object"
	if kind == answerStream && stream {
		want, what = "text/event-stream", "an SSE stream"
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, _ := mime.ParseMediaType(ct); mt != want {
		return &badAnswerError{fmt.Sprintf("answered 200 with Content-Type %q where %s returns %s (%s)", ct, path, what, want)}
	}
	head, err := peekBody(resp, len("retry:"))
	if err != nil {
		return err
	}
	ok := false
	if want == "text/event-stream" {
		for _, f := range sseFields {
			ok = ok || bytes.HasPrefix(head, f)
		}
	} else {
		ok = len(head) > 0 && head[0] == '{'
	}
	if ok {
		return nil
	}
	start := "an empty body"
	if len(head) > 0 {
		start = "a body that starts " + strconv.Quote(string(head[:min(len(head), 40)]))
	}
	return &badAnswerError{fmt.Sprintf("answered 200 with %s where %s returns %s", start, path, what)}
}

// peekBody reads resp.Body until it has enough bytes past leading
// whitespace (or maxAnswerPeek, or its end) and returns them without that
// whitespace; resp.Body then reads the same bytes from the start.
func peekBody(resp *http.Response, enough int) ([]byte, error) {
	buf := make([]byte, 0, maxAnswerPeek)
	body := resp.Body
	var head []byte
	for len(buf) < cap(buf) {
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		head = bytes.TrimLeft(buf, " \t\r\n")
		if len(head) >= enough || err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), body), body}
	return head, nil
}
