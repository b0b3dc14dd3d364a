package plugins

import (
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/hashicorp/go-plugin"
)

// The go-plugin handshake that host and plugin must agree on. A plugin
// written in another language sets the same values.
//
// Protocol versions are negotiated by go-plugin (VersionedPlugins): the host
// offers OldestProtocolVersion..ProtocolVersion in PLUGIN_PROTOCOL_VERSIONS,
// a plugin built with Serve answers with the newest version both speak, and
// the host reads the outcome from go-plugin (Client.ProtocolVersion). Each
// version only adds calls to the one gRPC service (plugins/proto/
// backend.proto), so a plugin built against an older version keeps working
// with a newer host, which does not make the calls that plugin lacks. A
// plugin that speaks only a version newer than the host's is refused at the
// handshake with an error naming both (ErrProtocolVersion).
const (
	// ProtocolVersion is the newest version of the protocol this package
	// speaks: 2 adds Sleep, Wake and Residency to version 1.
	ProtocolVersion = 2
	// OldestProtocolVersion is the oldest version this package still
	// speaks: 1, the first (Start, Stop, Health, Estimate, Stats,
	// Capabilities, Wait, Validate).
	OldestProtocolVersion = 1
	// MagicCookieKey is the environment variable the host sets for the
	// plugin; a binary run without it refuses to serve.
	MagicCookieKey = "LOADOUT_BACKEND_PLUGIN"
	// MagicCookieValue is the value of MagicCookieKey.
	MagicCookieValue = "b4c7e2f0-loadout-backend-v1"
)

// pluginName is the key of the one plugin a backend binary serves.
const pluginName = "backend"

// handshake is the part of go-plugin's handshake other than the version,
// which VersionedPlugins carries.
var handshake = plugin.HandshakeConfig{
	MagicCookieKey:   MagicCookieKey,
	MagicCookieValue: MagicCookieValue,
}

// pluginStderr is the plugin's real stderr, which the host reads and logs.
// go-plugin points os.Stderr elsewhere once Serve runs, so it is kept here.
var pluginStderr = os.Stderr

// Serve serves b to the host that launched this process and returns when the
// host has closed the connection (Client.Kill). It is what a backend
// plugin's main calls; run without the host's handshake environment it
// prints a notice and exits with status 1.
//
// It speaks every protocol version from OldestProtocolVersion to
// ProtocolVersion and go-plugin settles on the newest the host offers too.
// The calls of version 2 reach b only where b implements them (Sleeper,
// ResidencyReporter); otherwise they answer ErrNotSupported.
//
// Nothing may be written to stdout before or while Serve runs: go-plugin's
// handshake line is the first line the host reads there. Log to stderr,
// through Logger.
//
// If b is also an io.Closer, Close is called exactly once before Serve
// returns, and on SIGTERM (then the process exits with status 0): it must
// stop every model server b started, so none outlives the plugin. SIGINT is
// ignored; the host decides when a plugin ends.
func Serve(b Backend) {
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			if c, ok := b.(io.Closer); ok {
				if err := c.Close(); err != nil {
					Logger().Error("backend shutdown failed", "err", err)
				}
			}
		})
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		shutdown()
		os.Exit(0)
	}()

	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: versionedPlugins(b),
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           newHCLogger(Logger(), "plugin"),
	})
	shutdown()
}

// Logger returns a logger for code running inside a backend plugin. It writes
// JSON lines to the plugin's stderr in the shape go-plugin parses, so the
// host logs them with their level, message and attributes.
func Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(pluginStderr, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				return slog.String("@level", a.Value.String())
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	}))
}
