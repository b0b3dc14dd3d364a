package config

import (
	_ "embed"
	"slices"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the configuration `loadout serve` uses when no --config
// is given: three models on the simulator backend (small and medium in one
// exclusive swapping group, embed in a persistent group) on one declared 24 GiB
// GPU. It parses with no warnings. The caller may modify the returned slice.
func DefaultYAML() []byte { return slices.Clone(defaultYAML) }
