package plugins

import "embed"

// Source is this module's own source: go.mod, go.sum, the package's Go
// files and proto/. `loadout backend new` writes it beside a new backend
// module (by a replace directive) when the loadout binary knows no released
// version of this module to require, so the new module builds offline
// against exactly the protocol that loadout speaks. A plugin that does not
// refer to Source does not carry it: the linker drops it.
//
//go:embed go.mod go.sum *.go proto
var Source embed.FS
