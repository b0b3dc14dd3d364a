package config

import (
	"testing"
)

const selectorBase = `
models:
  a: {backend: sim, aliases: [alpha]}
  b: {backend: sim}
  c: {backend: sim}
routing:
  router:
    use: group
    settings:
      groups:
        pair: {swap: false, members: [a, b]}
peers:
  remote:
    proxy: http://192.0.2.1
    models: [r1]
`

func TestSelectors_Decoded(t *testing.T) {
	cfg, errs, warns := parse(t, selectorBase+`
captureBuffer: 3
selectors:
  fast:
    strategy: warm
    targets: [alpha, b]
    name: Fast
    metadata: {purpose: chat}
  spill:
    strategy: spillover
    targets: [a, b]
    settings: {spillover: 4}
  far:
    strategy: pin
    targets: [remote/r1, c]
profiles:
  day:
    description: daytime
    pins:
      chat: fast
      c: ~
`)
	eq(t, "errs", errs, nil)
	eq(t, "warns", warns, nil)
	f := cfg.Selectors["fast"]
	eq(t, "fast.Models", f.Models, []string{"a", "b"})
	eq(t, "fast.Targets", f.Targets, []string{"alpha", "b"})
	eq(t, "fast.Name", f.Name, "Fast")
	eq(t, "fast.Metadata", f.Metadata, map[string]any{"purpose": "chat"})
	eq(t, "spill.Spillover", cfg.Selectors["spill"].Spillover, 4)
	eq(t, "fast.Spillover default", f.Spillover, 1)
	eq(t, "far.Local(0)", cfg.Selectors["far"].Local(cfg, 0), false)
	eq(t, "SelectorIDs", cfg.SelectorIDs(), []string{"far", "fast", "spill"})
	eq(t, "day.Pins", cfg.Profiles["day"].Pins, map[string]string{"chat": "fast", "c": ""})
	eq(t, "day.Description", cfg.Profiles["day"].Description, "daytime")
	eq(t, "CaptureBuffer", cfg.CaptureBuffer, int64(3<<20))
}

func TestSelectors_ErrorsAtLine(t *testing.T) {
	tests := map[string]string{
		"selectors:\n  a:\n    strategy: pin\n    targets: [b]\n":                                            `c.yaml:17:3: selectors.a: selector "a" is also the id of model a (line 3)`,
		"selectors:\n  alpha:\n    strategy: pin\n    targets: [b]\n":                                        `c.yaml:17:3: selectors.alpha: selector "alpha" is also an alias of model a`,
		"selectors:\n  remote/r1:\n    strategy: pin\n    targets: [b]\n":                                    `c.yaml:17:3: selectors.remote/r1: selector "remote/r1" is also a peer model's full name, which is reserved`,
		"selectors:\n  s:\n    strategy: pin\n    targets: [t]\n  t:\n    strategy: pin\n    targets: [a]\n": `c.yaml:19:15: selectors.s.targets[0]: target "t" is a selector (line 20); a selector's targets are models, not selectors`,
		"selectors:\n  s:\n    strategy: fast\n    targets: [a]\n":                                           `c.yaml:18:15: selectors.s.strategy: unknown strategy "fast" (valid: warm, pin, spillover)`,
		"selectors:\n  s:\n    targets: [a]\n":                                                               `c.yaml:17:3: selectors.s.strategy: strategy is required (warm, pin or spillover)`,
		"selectors:\n  s:\n    strategy: pin\n":                                                              `c.yaml:17:3: selectors.s.targets: targets must list at least one model`,
		"selectors:\n  s:\n    strategy: pin\n    targets: [zz]\n":                                           `c.yaml:19:15: selectors.s.targets[0]: target "zz" is not a model, an alias or a peer's model`,
		"selectors:\n  s:\n    strategy: warm\n    targets: [r1]\n":                                          `c.yaml:19:15: selectors.s.targets[0]: target "r1" is a peer's model; a warm selector's targets must be local models`,
		"selectors:\n  s:\n    strategy: spillover\n    targets: [a, alpha]\n":                               `c.yaml:19:18: selectors.s.targets[1]: target "alpha" is model a again (targets[0])`,
		"selectors:\n  s:\n    strategy: spillover\n    targets: [a, c]\n":                                   `c.yaml:17:3: selectors.s.targets: spillover targets must share one routing group: a is in group pair, c in group (default)`,
		"selectors:\n  s:\n    strategy: spillover\n    targets: [a]\n    settings: {spillover: 0}\n":        `c.yaml:20:27: selectors.s.settings.spillover: want 1 or more requests, got 0`,
		"selectors:\n  s:\n    strategy: pin\n    targets: [a]\n    colour: red\n":                           `c.yaml:20:5: selectors.s.colour: unknown key "colour"`,
	}
	for src, want := range tests {
		_, errs, _ := parse(t, selectorBase+src)
		eq(t, src, errs, []string{want})
	}
}

func TestProfiles_ErrorsAtLine(t *testing.T) {
	tests := map[string]string{
		"profiles:\n  p:\n    pins: {x: nope}\n":            `c.yaml:18:15: profiles.p.pins.x: target "nope" is not a model, an alias, a peer's model or a selector`,
		"profiles:\n  p:\n    description: d\n":             `c.yaml:17:3: profiles.p.pins: pins must list at least one name`,
		"profiles:\n  p:\n    pins: {remote/r1: a}\n":       `c.yaml:18:12: profiles.p.pins.remote/r1: pin "remote/r1" is a peer model's full name, which is reserved`,
		"profiles:\n  p: 3\n":                               `c.yaml:17:6: profiles.p: want a mapping of description and pins, got a number`,
		"profiles:\n  p:\n    pins: {x: a}\n    other: 1\n": `c.yaml:19:5: profiles.p.other: unknown key "other"`,
		"captureBuffer: -1\n":                               `c.yaml:16:16: captureBuffer: want 0 (capture off) to 1048576 megabytes, got -1`,
		"captureBuffer: lots\n":                             `c.yaml:16:16: captureBuffer: want a whole number of megabytes, got "lots"`,
	}
	for src, want := range tests {
		_, errs, _ := parse(t, selectorBase+src)
		eq(t, src, errs, []string{want})
	}
}

func TestCaptureBuffer_DefaultAndOff(t *testing.T) {
	cfg, errs, _ := parse(t, selectorBase)
	eq(t, "errs", errs, nil)
	eq(t, "default", cfg.CaptureBuffer, int64(DefaultCaptureBuffer))
	cfg, errs, _ = parse(t, selectorBase+"captureBuffer: 0\n")
	eq(t, "errs", errs, nil)
	eq(t, "off", cfg.CaptureBuffer, int64(0))
}
