package plugins

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// slogHCLogger is an hclog.Logger that writes to a *slog.Logger, so
// go-plugin's own lines and the plugin's stderr land in the host's log.
type slogHCLogger struct {
	l    *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*slogHCLogger)(nil)

func newHCLogger(l *slog.Logger, name string) *slogHCLogger {
	return &slogHCLogger{l: l, name: name}
}

// slogLevel maps hclog levels onto slog's; trace sits below debug.
func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *slogHCLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	attrs := append([]any{"logger", h.name}, h.args...)
	h.l.Log(context.Background(), slogLevel(level), msg, append(attrs, args...)...)
}

func (h *slogHCLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *slogHCLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *slogHCLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *slogHCLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *slogHCLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *slogHCLogger) enabled(level hclog.Level) bool {
	return h.l.Enabled(context.Background(), slogLevel(level))
}

func (h *slogHCLogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *slogHCLogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *slogHCLogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *slogHCLogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *slogHCLogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *slogHCLogger) ImpliedArgs() []any { return h.args }

func (h *slogHCLogger) With(args ...any) hclog.Logger {
	return &slogHCLogger{l: h.l, name: h.name, args: append(append([]any{}, h.args...), args...)}
}

func (h *slogHCLogger) Name() string { return h.name }

func (h *slogHCLogger) Named(name string) hclog.Logger {
	return &slogHCLogger{l: h.l, name: h.name + "." + name, args: h.args}
}

func (h *slogHCLogger) ResetNamed(name string) hclog.Logger {
	return &slogHCLogger{l: h.l, name: name, args: h.args}
}

// SetLevel is a no-op: the slog handler owns the level.
func (h *slogHCLogger) SetLevel(hclog.Level) {}

// GetLevel reports the lowest level the slog handler lets through.
func (h *slogHCLogger) GetLevel() hclog.Level {
	for _, level := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(level) {
			return level
		}
	}
	return hclog.Off
}

func (h *slogHCLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *slogHCLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo).Writer()
}
