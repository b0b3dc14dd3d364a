package config

import "testing"

// A backend's problem with an option is reported at that option's line,
// like every other configuration error.
func TestModel_OptionError(t *testing.T) {
	cfg, errs, _ := parse(t, "models:\n  fast:\n    backend: sim\n    options:\n      vram: 1GiB\n      tokens_per_second: -5\n  bare:\n    backend: sim\n")
	eq(t, "errors", errs, nil)
	m := cfg.Models["fast"]
	eq(t, "option", m.OptionError("tokens_per_second", "must be positive, got -5").Error(),
		"c.yaml:6:7: models.fast.options.tokens_per_second: must be positive, got -5")
	eq(t, "whole options", m.OptionError("", "want a JSON object").Error(),
		"c.yaml:4:5: models.fast.options: want a JSON object")
	eq(t, "unknown option", m.OptionError("bogus", "unknown option").Error(),
		"c.yaml:4:5: models.fast.options.bogus: unknown option")
	eq(t, "no options", cfg.Models["bare"].OptionError("x", "unknown option").Error(),
		"c.yaml:7:3: models.bare.options.x: unknown option")
}
