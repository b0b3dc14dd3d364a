package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/logs"
)

// newServeLogger is serve's logger, writing to w at level, shaped by
// llama-swap's logToStdout (what the log carries: Loadout's own lines, the
// model servers' output lines, both, or nothing; config.LogProxy and
// friends) and logTimeFormat (the timestamp's layout, or none; absent:
// slog's own). With store set, its lines at level also go to store's
// Proxy ring (logs.ProxyHandler), whatever logToStdout says, as
// llama-swap's proxy log keeps them. Errors: an unknown level.
func newServeLogger(w io.Writer, level string, cfg *config.Config, store *logs.Store) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: slog.LevelDebug} // logSelect filters
	if cfg.LogTime != nil {
		layout := *cfg.LogTime
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if a.Key != slog.TimeKey || len(groups) > 0 {
				return a
			}
			if layout == "" {
				return slog.Attr{} // llama-swap's "": no timestamp
			}
			return slog.String(slog.TimeKey, a.Value.Time().Format(layout))
		}
	}
	var h slog.Handler = &logSelect{inner: slog.NewTextHandler(w, opts), level: l, mode: cfg.LogToStdout}
	if store != nil {
		kept := *opts
		kept.Level = l
		h = slog.NewMultiHandler(h, logs.ProxyHandler(store, &kept))
	}
	return slog.New(h), nil
}

// logSelect passes the records logToStdout selects: for config.LogProxy
// Loadout's own at level (model server output too at debug, as before),
// for config.LogUpstream the model servers' output lines (logs.OutputMessage)
// whatever the level, for config.LogBoth both, for config.LogNone nothing.
type logSelect struct {
	inner slog.Handler
	level slog.Level
	mode  string
}

func (h *logSelect) Enabled(_ context.Context, l slog.Level) bool {
	switch h.mode {
	case config.LogNone:
		return false
	case config.LogUpstream, config.LogBoth:
		return true // output lines are debug records; Handle decides
	}
	return l >= h.level
}

func (h *logSelect) Handle(ctx context.Context, r slog.Record) error {
	out := r.Message == logs.OutputMessage
	pass := false
	switch h.mode {
	case config.LogUpstream:
		pass = out
	case config.LogBoth:
		pass = out || r.Level >= h.level
	case config.LogNone:
	default:
		pass = r.Level >= h.level
	}
	if !pass {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *logSelect) WithAttrs(as []slog.Attr) slog.Handler {
	return &logSelect{inner: h.inner.WithAttrs(as), level: h.level, mode: h.mode}
}

func (h *logSelect) WithGroup(name string) slog.Handler {
	return &logSelect{inner: h.inner.WithGroup(name), level: h.level, mode: h.mode}
}
