// Package sdksource carries the policy SDK's source in the loadout binary,
// so `loadout policy new` writes a module that builds, tests and passes
// `loadout policy check` offline, against exactly the SDK (and so the ABI)
// the binary was built with, from a source build or a release alike.
//
// The SDK is a module of its own (sdk/go.mod), so no package of this
// module can embed its files directly (go:embed stops at a module
// boundary). WriteArchive packs it, with every module of its module graph
// taken from the module cache, into archive/sdk.zip, which `make build`
// (go run ./internal/sdksource/gen) and cmd/loadout's TestMain write before
// building the binary; this package embeds that directory. Unpack writes
// the modules into a new policy module's third_party directory, which its
// go.mod replaces them with. A binary built without the archive (a bare
// `go build ./cmd/loadout`) still builds and runs: Embedded reports
// ErrNotEmbedded.
//
// It owns only the archive: what the new module holds is cmd/loadout's
// (policy new) job.
package sdksource
