package activity

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/proxy"
)

// BenchmarkLog_Record is what the activity log costs a request on its own
// goroutine (the offer to the writer's channel), with the writer inserting
// into a real SQLite file behind it; b.N rows are flushed before the timer
// stops, so a writer that cannot keep up shows as a slower Record or as
// drops (reported).
func BenchmarkLog_Record(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	s := proxy.RequestSummary{ID: "req", Time: time.Now(), Model: "small", Client: "bench", Status: 200,
		PromptTokens: 11, CompletionTokens: 22, Duration: 0.1}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		l.Record(s)
	}
	if err := l.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}
