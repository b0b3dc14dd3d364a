package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/logs"
)

func TestServeLogger_LogToStdout(t *testing.T) {
	tests := []struct {
		mode       string
		own, model bool // Loadout's info line, a model server's output line
	}{
		{config.LogProxy, true, false},
		{config.LogUpstream, false, true},
		{config.LogBoth, true, true},
		{config.LogNone, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			var b bytes.Buffer
			log, err := newServeLogger(&b, "info", &config.Config{LogToStdout: tt.mode}, nil)
			if err != nil {
				t.Fatal(err)
			}
			log.Info("swap done", "model", "m")
			log.With("model", "m").Debug(logs.OutputMessage, "stream", "stdout", "line", "llama ready")
			log.Debug("a debug line")
			if got := strings.Contains(b.String(), "swap done"); got != tt.own {
				t.Errorf("Loadout's line shown %t, want %t:\n%s", got, tt.own, b.String())
			}
			if got := strings.Contains(b.String(), "llama ready"); got != tt.model {
				t.Errorf("model output shown %t, want %t:\n%s", got, tt.model, b.String())
			}
			if strings.Contains(b.String(), "a debug line") {
				t.Errorf("a debug line passed level info:\n%s", b.String())
			}
		})
	}
}

func TestServeLogger_LogTimeFormat(t *testing.T) {
	for _, tt := range []struct {
		layout *string
		want   func(string) bool
	}{
		{nil, func(s string) bool { return strings.HasPrefix(s, "time=2") }},
		{ptr(""), func(s string) bool { return strings.HasPrefix(s, "level=INFO") }},
		{ptr(time.Kitchen), func(s string) bool { return strings.Contains(s, "M level=INFO") }},
	} {
		var b bytes.Buffer
		log, _ := newServeLogger(&b, "info", &config.Config{LogToStdout: config.LogProxy, LogTime: tt.layout}, nil)
		log.Info("x")
		if !tt.want(b.String()) {
			t.Errorf("layout %v: line %q", tt.layout, b.String())
		}
	}
}

func ptr[T any](v T) *T { return &v }
