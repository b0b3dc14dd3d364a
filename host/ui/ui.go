// Package ui is Loadout's web UI: static files embedded in the binary and
// served at /ui/ with no CDN and no network. The page is a Preact + htm
// application (vendored under static/vendor with their licences; no Node
// toolchain at build time) that reads the admin API once and then stays
// live on GET /api/events and GET /logs/stream, with no polling loops.
// An API key entered in the page is kept in the browser's localStorage and
// sent as a Bearer token.
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
