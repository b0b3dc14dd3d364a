// Package ui is Loadout's web UI: static files embedded in the binary and
// served at /ui/ (its icon also at /favicon.ico) with no CDN and no
// network. The page is a Preact + htm application (vendored under
// static/vendor with their licences; no Node toolchain at build time): a
// summary strip (VRAM per GPU by holder, model counts, the last five
// minutes' tokens/s, requests/s and errors from GET /api/summary, running
// jobs) over tabs for models (with the swap timeline), activity, logs,
// jobs and policies. On open it reads GET /api/events/history first, then
// the admin API, then follows GET /api/events from the history's last_id,
// so it is full at first paint and misses nothing; it shows "loading"
// until data arrives, never a false empty state. Two timers only: the
// summary's rates are re-read every 10 s (the window slides) and an open
// running job's output every 2 s (the jobs API has no log stream). On a
// 401 it asks for the API key once, keeps it in the browser's localStorage
// and sends it as a Bearer token.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Files is the UI's file tree (index.html at its root).
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed above guarantees the directory
	}
	return sub
}

// Handler serves the UI's files; mount it with the /ui/ prefix stripped.
func Handler() http.Handler {
	files := http.FileServerFS(Files())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:")
		files.ServeHTTP(w, r)
	})
}
