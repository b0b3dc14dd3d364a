package config

import (
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The values of logToStdout (llama-swap's): what Loadout's log output
// (stderr, as Go servers write it) carries.
const (
	LogProxy    = "proxy"    // Loadout's own lines (the default); model server output only at logLevel debug
	LogUpstream = "upstream" // the model servers' output lines only
	LogBoth     = "both"     // both, interleaved
	LogNone     = "none"     // nothing; /logs and /api/events still have everything
)

var logToStdoutValues = []string{LogProxy, LogUpstream, LogBoth, LogNone}

// logTimeLayouts maps logTimeFormat's names (llama-swap's) to Go time
// layouts; "" means lines without a timestamp.
var logTimeLayouts = map[string]string{
	"":            "",
	"ansic":       time.ANSIC,
	"unixdate":    time.UnixDate,
	"rubydate":    time.RubyDate,
	"rfc822":      time.RFC822,
	"rfc822z":     time.RFC822Z,
	"rfc850":      time.RFC850,
	"rfc1123":     time.RFC1123,
	"rfc1123z":    time.RFC1123Z,
	"rfc3339":     time.RFC3339,
	"rfc3339nano": time.RFC3339Nano,
	"kitchen":     time.Kitchen,
	"stamp":       time.Stamp,
	"stampmilli":  time.StampMilli,
	"stampmicro":  time.StampMicro,
	"stampnano":   time.StampNano,
}

// logToStdout decodes logToStdout: one of logToStdoutValues.
func (d *decoder) logToStdout(cfg *Config, n *yaml.Node) {
	s, ok := d.str(n, "logToStdout")
	if !ok {
		return
	}
	if !slices.Contains(logToStdoutValues, s) {
		d.errorf(n, "logToStdout", "want one of %s, got %q", strings.Join(logToStdoutValues, ", "), s)
		return
	}
	cfg.LogToStdout = s
}

// logTimeFormat decodes logTimeFormat into Config.LogTime: a name of
// logTimeLayouts, case and surrounding spaces ignored as llama-swap
// ignores them; an unknown name is an error (llama-swap drops the
// timestamp without a word).
func (d *decoder) logTimeFormat(cfg *Config, n *yaml.Node) {
	s, ok := d.str(n, "logTimeFormat")
	if !ok {
		return
	}
	layout, known := logTimeLayouts[strings.ToLower(strings.TrimSpace(s))]
	if !known {
		names := sortedKeys(logTimeLayouts)[1:] // without ""
		d.errorf(n, "logTimeFormat", "want \"\" (no timestamp) or one of %s, got %q", strings.Join(names, ", "), s)
		return
	}
	cfg.LogTime = &layout
}
