// Package settings is how a policy reads its settings: the JSON object the
// host hands to its factory at init (routing.scheduler.settings or
// routing.router.settings in the configuration).
//
// It decodes strictly: Object refuses a key it was not told about and names
// the known ones; every Value knows its path ("matrix.vars.llama-70b",
// "groups.chat.members[1]"), and every error it makes is an *Error that
// carries that path. Duration and Size read the two units policies share;
// OneOf reads a setting that names one of a fixed set ("arrival" or
// "queued_wait").
//
// An *Error crosses the Wasm boundary as text (the ABI's set_error carries
// a string), in one stable form that Format writes and Parse reads back:
//
//	settings: matrix.vars.llama-70b: var ids are 1 to 32 letters, digits, '-' or '.'
//
// The host (host/config) parses it out of a policy's init error and points
// at the YAML node the path names, with file:line:col, for built-in and
// third-party policies alike. A policy that returns an *Error (or wraps one
// with %w, or joins several with errors.Join) from its factory needs to do
// nothing else.
//
// The package builds for GOOS=wasip1 and links neither encoding/json nor
// fmt: JSON is read by jsontext
// (github.com/go-json-experiment/json, the mirror of Go's
// encoding/json/v2, which uses no reflection) and messages are built with
// strconv, so a Go guest that reads its settings stays about 1 MB smaller
// and compiles a third faster (docs/RATIONALE.md, "Smaller guests"). It
// owns settings decoding and the error form; it knows nothing of any
// policy's keys.
package settings
