package proxy

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// decodeBody is the router's middleware for a request body's
// Content-Encoding (RFC 9110 §8.4): gzip, the one coding HTTP clients
// compress request bodies with (OpenAI's and Ollama's clients among
// them, when asked), is decoded as the handler reads the body, and the
// header removed, so every handler, and every upstream, gets the body
// plain; identity is nothing to decode. Any other coding is refused (415,
// with Accept-Encoding saying what is taken) rather than passed on: a
// handler would read it as a malformed body, and an upstream (llama-server,
// vLLM) decodes none. It runs only once a route matched, so an unknown
// path or method is still a 404 or 405.
//
// The decoded body is what the request-body limit (maxBody) bounds, as
// readBody and passthrough apply it, so a small body that inflates
// without end (a decompression bomb) is cut at the limit, a 413. The
// compressed body is bounded by the same limit: what compresses at all is
// smaller compressed, and the bound ends a stream of empty gzip members,
// which decodes to nothing for as long as it is sent.
func (s *Server) decodeBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			// No body, nothing to decode: the header says nothing.
			r.Header.Del("Content-Encoding")
			next.ServeHTTP(w, r)
			return
		}
		gz, e := gzipCoded(r.Header)
		if e != nil {
			w.Header().Set("Accept-Encoding", "gzip")
			s.writeError(w, r, e)
			return
		}
		r.Header.Del("Content-Encoding")
		if !gz || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > s.maxBody {
			s.writeError(w, r, s.tooLarge())
			return
		}
		r.Body = &gzipBody{raw: http.MaxBytesReader(w, r.Body, s.maxBody)}
		// The decoded length is known only once it is read.
		r.ContentLength = -1
		r.Header.Del("Content-Length")
		next.ServeHTTP(w, r)
	})
}

// gzipCoded reports whether a request's Content-Encoding is gzip (or its
// old name x-gzip, which RFC 9110 §8.4.1.3 asks a recipient to take as
// gzip), with identity, which changes nothing, left out; false for none.
// Any other coding, or gzip applied more than once (a decoder each, for
// a header's worth of them), is a 415.
func gzipCoded(h http.Header) (bool, *apiError) {
	gz := false
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			switch c = strings.ToLower(strings.TrimSpace(c)); {
			case c == "" || c == "identity":
			case (c == "gzip" || c == "x-gzip") && !gz:
				gz = true
			default:
				return false, &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_content_encoding",
					msg: fmt.Sprintf("Content-Encoding %s is not accepted: send the body plain or gzip-compressed once (Content-Encoding: gzip)", echoed(strings.Join(h.Values("Content-Encoding"), ", ")))}
			}
		}
	}
	return gz, nil
}

// gzipBody is a gzip-encoded request body, decoded as it is read. The
// decoder is made at the first Read, when a handler reads the body under
// its deadlines (readBody's bodyDeadline), not in the middleware, where
// reading the gzip header from a client that sends nothing would wait
// without one.
type gzipBody struct {
	raw io.ReadCloser
	zr  *gzip.Reader
	err error // the decoder could not be made
}

func (b *gzipBody) Read(p []byte) (int, error) {
	if b.zr == nil {
		if b.err != nil {
			return 0, b.err
		}
		zr, err := gzip.NewReader(b.raw)
		switch {
		case err == io.EOF: // no bytes at all: an empty body
			b.err = io.EOF
			return 0, b.err
		case err != nil:
			b.err = fmt.Errorf("decoding its gzip: %w", err)
			return 0, b.err
		}
		b.zr = zr
	}
	n, err := b.zr.Read(p)
	if err != nil && err != io.EOF {
		// Wrapped, not replaced: readBody tells the limit's
		// *http.MaxBytesError and a deadline's error by their type.
		err = fmt.Errorf("decoding its gzip: %w", err)
	}
	return n, err
}

// Close closes the body as the client sent it.
func (b *gzipBody) Close() error { return b.raw.Close() }
