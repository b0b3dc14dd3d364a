package logs

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestStore_RingsPerModelAndAll(t *testing.T) {
	s := New(20)
	s.Append("a", "stdout", "one")
	s.Append("b", "stderr", "two")
	s.Append("a", "stdout", "three")
	if got := string(s.History("a")); got != "one\nthree\n" {
		t.Fatalf("a = %q", got)
	}
	if got := string(s.History("")); got != "[b] two\n[a] three\n" {
		t.Fatalf("all = %q (bounded to 20 bytes)", got)
	}
	s.Append("a", "stdout", strings.Repeat("x", 100)) // longer than the ring: kept alone
	if got := string(s.History("a")); got != strings.Repeat("x", 100)+"\n" {
		t.Fatalf("a after a long line = %q", got)
	}
}

func TestStore_SubscribeGetsHistoryThenLive(t *testing.T) {
	s := New(0)
	s.Append("a", "stdout", "old")
	sub, past := s.Subscribe("a", true)
	defer sub.Close()
	s.Append("b", "stdout", "other model")
	s.Append("a", "stdout", "new")
	if string(past) != "old\n" {
		t.Fatalf("history = %q", past)
	}
	if got := <-sub.Lines(); got != "new\n" {
		t.Fatalf("live = %q", got)
	}
	all, past := s.Subscribe("", false)
	defer all.Close()
	if past != nil {
		t.Fatalf("no-history got %q", past)
	}
	s.Append("b", "stderr", "x")
	if got := <-all.Lines(); got != "[b] x\n" {
		t.Fatalf("all live = %q", got)
	}
}

func TestStore_SlowReaderIsDropped(t *testing.T) {
	s := New(0)
	sub, _ := s.Subscribe("a", false)
	for range subBuffer + 10 {
		s.Append("a", "stdout", "line") // never blocks
	}
	n := 0
	for range sub.Lines() {
		n++
	}
	if n != subBuffer {
		t.Fatalf("read %d lines before the drop, want %d", n, subBuffer)
	}
}

// The handler takes output records at debug level even when the logger
// only prints info, and passes the rest through by the inner level.
func TestHandler_TakesModelOutput(t *testing.T) {
	var printed bytes.Buffer
	s := New(0)
	log := slog.New(Handler(slog.NewTextHandler(&printed, &slog.HandlerOptions{Level: slog.LevelInfo}), s))
	log.With("logger", "backend-plugin", "model", "m").Debug(OutputMessage, "stream", "stderr", "line", "loading weights")
	log.Debug("not printed")
	log.Info("printed")
	if got := string(s.History("m")); got != "loading weights\n" {
		t.Fatalf("history = %q", got)
	}
	if out := printed.String(); strings.Contains(out, "not printed") || strings.Contains(out, "loading weights") || !strings.Contains(out, "printed") {
		t.Fatalf("printed = %q", out)
	}
}

// Loadout's own lines go to the Proxy and All rings, model server lines
// to their model's, Upstream and All (after "[model] "), each to its own
// live readers.
func TestStore_ProxyUpstreamAndAll(t *testing.T) {
	s := New(0)
	proxy, _ := s.Subscribe(Proxy, false)
	defer proxy.Close()
	up, _ := s.Subscribe(Upstream, false)
	defer up.Close()
	s.AppendProxy("msg=ready")
	s.Append("a", "stdout", "listening")
	for name, want := range map[string]string{
		Proxy: "msg=ready\n", Upstream: "[a] listening\n", All: "msg=ready\n[a] listening\n", "a": "listening\n",
	} {
		if got := string(s.History(name)); got != want {
			t.Errorf("History(%q) = %q, want %q", name, got, want)
		}
	}
	if got := <-proxy.Lines(); got != "msg=ready\n" {
		t.Errorf("proxy reader got %q", got)
	}
	if got := <-up.Lines(); got != "[a] listening\n" {
		t.Errorf("upstream reader got %q", got)
	}
	select {
	case l := <-proxy.Lines():
		t.Errorf("proxy reader got a model's line %q", l)
	default:
	}
}

// ProxyHandler keeps the host's records at its level, one line each, and
// leaves model server output records to Handler.
func TestProxyHandler_KeepsTheHostsLines(t *testing.T) {
	s := New(0)
	log := slog.New(Handler(ProxyHandler(s, &slog.HandlerOptions{Level: slog.LevelInfo}), s))
	log.Info("model ready", "model", "a")
	log.Debug("below the level")
	log.With("model", "m").Debug(OutputMessage, "stream", "stdout", "line", "loading")
	got := string(s.History(Proxy))
	if strings.Count(got, "\n") != 1 || !strings.Contains(got, `msg="model ready" model=a`) {
		t.Errorf("Proxy ring = %q, want the one info line", got)
	}
	if up := string(s.History(Upstream)); up != "[m] loading\n" {
		t.Errorf("Upstream ring = %q", up)
	}
}
