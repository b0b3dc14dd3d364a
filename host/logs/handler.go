package logs

import (
	"context"
	"log/slog"
	"strings"
)

// OutputMessage is the message backend plugins log each model server
// output line with (backends/cmd), with "model", "stream" and "line"
// attributes.
const OutputMessage = "model server output"

// Handler returns a slog.Handler that passes every record to inner as
// inner would (by inner's level), and also takes model server output
// records, whatever their level, into store. Wrap the logger the backend
// plugin launchers use with it.
func Handler(inner slog.Handler, store *Store) slog.Handler {
	return &handler{inner: inner, store: store}
}

type handler struct {
	inner slog.Handler
	store *Store
	attrs []slog.Attr // from WithAttrs, searched for the model
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	// Output records are debug records: let them through to Handle.
	return level >= slog.LevelDebug || h.inner.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == OutputMessage {
		var model, stream, line string
		pick := func(a slog.Attr) bool {
			switch a.Key {
			case "model":
				model = a.Value.String()
			case "stream":
				stream = a.Value.String()
			case "line":
				line = a.Value.String()
			}
			return true
		}
		for _, a := range h.attrs {
			pick(a)
		}
		r.Attrs(pick)
		if model != "" {
			h.store.Append(model, stream, line)
		}
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{inner: h.inner.WithAttrs(as), store: h.store, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{inner: h.inner.WithGroup(name), store: h.store, attrs: h.attrs}
}

// ProxyHandler returns a slog.Handler that writes Loadout's own records,
// formatted as slog's text handler formats them with opts (its level
// included), into store's Proxy ring, one line per record; model server
// output records are Handler's and are left out. Serve's logger sends its
// records here beside its own output (slog.NewMultiHandler), so the rings
// hold its lines whatever logToStdout lets through to stderr, as
// llama-swap's proxy log monitor does.
func ProxyHandler(store *Store, opts *slog.HandlerOptions) slog.Handler {
	return &proxyHandler{inner: slog.NewTextHandler(proxyWriter{store}, opts)}
}

type proxyHandler struct{ inner slog.Handler }

func (h *proxyHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *proxyHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == OutputMessage {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *proxyHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &proxyHandler{inner: h.inner.WithAttrs(as)}
}

func (h *proxyHandler) WithGroup(name string) slog.Handler {
	return &proxyHandler{inner: h.inner.WithGroup(name)}
}

// proxyWriter takes what a text handler writes (one record per Write,
// ending in a newline) into the Proxy ring.
type proxyWriter struct{ store *Store }

func (w proxyWriter) Write(p []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimSuffix(string(p), "\n"), "\n") {
		w.store.AppendProxy(line)
	}
	return len(p), nil
}
