package routermode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/backends/llamaserver"
)

// Model is one model router mode defines, as the llamaserver backend runs
// it.
type Model struct {
	// ID is the model's name, as llama-server's router names it.
	ID string
	// File and Line are where it is defined: the preset file and its
	// section's line, or the GGUF file (or subdirectory) of a models-dir
	// model with Line 0.
	File string
	Line int
	// Source says, for reports, what defined it: "models dir", "preset",
	// or "models dir + preset".
	Source string
	// Args are its llama-server flags, [*] first, then the directory's,
	// then its own section's (a later value of a flag replaces an earlier
	// one in place).
	Args []llamaserver.Arg
	// Options are the llamaserver backend's options (a model's options:),
	// from Args, with binary set when Input.Binary is.
	Options map[string]any
	// StopTimeout is the preset's stop-timeout (seconds between the stop
	// request and the kill); 0 when not set.
	StopTimeout time.Duration
	// LoadOnStartup is the preset's load-on-startup.
	LoadOnStartup bool
}

// Input names the router-mode inputs.
type Input struct {
	// Dir is the models directory (--models-dir); "" for none.
	Dir string
	// Preset is the preset file (--models-preset); "" for none.
	Preset string
	// Binary is the llama-server to run the models with; "" for the
	// backend's default (llama-server on PATH). Its --help is what preset
	// keys are checked against.
	Binary string
}

// Warning is something accepted but not acted on, or decided where
// llama-server's own choice is not defined; it names the file and line.
type Warning struct {
	File    string
	Line    int
	Message string
}

func (w Warning) String() string { return position(w.File, w.Line) + ": " + w.Message }

// Error is a problem in a router-mode input at File:Line (Line 0: the
// file or directory as a whole).
type Error struct {
	File    string
	Line    int
	Message string
}

func (e *Error) Error() string { return position(e.File, e.Line) + ": " + e.Message }

func position(file string, line int) string {
	if line > 0 {
		return file + ":" + strconv.Itoa(line)
	}
	return file
}

// Load reads in's models directory and preset into models, sorted by id.
// Errors (every one found, joined, each an *Error naming file:line): see
// the package comment.
func Load(ctx context.Context, in Input) ([]Model, []Warning, error) {
	var (
		errs  []error
		warns []Warning
	)
	byID := map[string]*Model{}
	if in.Dir != "" {
		found, w, err := scanDir(in.Dir)
		warns = append(warns, w...)
		if err != nil {
			errs = append(errs, err)
		}
		for _, e := range found {
			args := []llamaserver.Arg{{Flag: "--model", Words: []string{"--model", e.model}}}
			if e.mmproj != "" {
				args = append(args, llamaserver.Arg{Flag: "--mmproj", Words: []string{"--mmproj", e.mmproj}})
			}
			byID[e.id] = &Model{ID: e.id, File: e.file, Source: "models dir", Args: args}
		}
	}
	var global *section
	if in.Preset != "" {
		p, err := readPreset(ctx, in.Preset, in.Binary)
		warns = append(warns, p.warns...)
		if err != nil {
			errs = append(errs, err)
		}
		global = p.global
		for _, s := range p.sections {
			if s.failed {
				delete(byID, s.name) // its errors are reported; a model half made is not
				continue
			}
			m := byID[s.name]
			if m == nil {
				m = &Model{ID: s.name, Source: "preset"}
				byID[s.name] = m
			} else {
				m.Source = "models dir + preset"
			}
			m.File, m.Line = in.Preset, s.line
			m.Args = merge(m.Args, s.args)
			m.StopTimeout, m.LoadOnStartup = s.stopTimeout, s.loadOnStartup
		}
	}
	var models []Model
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range byID {
			if !yield(id) {
				return
			}
		}
	}) {
		m := byID[id]
		if global != nil {
			m.Args = merge(global.args, m.Args)
			if m.StopTimeout == 0 {
				m.StopTimeout = global.stopTimeout
			}
		}
		if err := m.finish(in); err != nil {
			errs = append(errs, err)
			continue
		}
		models = append(models, *m)
	}
	if len(models) == 0 && len(errs) == 0 {
		errs = append(errs, &Error{File: in.Preset, Message: "the preset defines no model"})
	}
	return models, warns, errors.Join(errs...)
}

// finish checks the model's GGUF and turns its flags into options.
func (m *Model) finish(in Input) error {
	fail := func(format string, a ...any) error {
		return &Error{File: m.File, Line: m.Line, Message: fmt.Sprintf("model %s: ", m.ID) + fmt.Sprintf(format, a...)}
	}
	model := ""
	for _, a := range m.Args {
		if a.Flag == "--model" && len(a.Words) == 2 {
			model = a.Words[1]
		}
	}
	if model == "" {
		return fail("no GGUF file: the preset's section names none (model = PATH) and the models dir has no model of this name")
	}
	if _, err := os.Stat(model); err != nil {
		return fail("GGUF file %s: %v", model, errors.Unwrap(err))
	}
	opts, err := llamaserver.OptionsFromArgs(m.Args)
	if err != nil {
		return fail("%v", err)
	}
	if in.Binary != "" {
		opts["binary"] = in.Binary
	}
	m.Options = opts
	return nil
}

// merge is base with over's flags applied: a flag already in base takes
// over's value in its place, a new one is appended.
func merge(base, over []llamaserver.Arg) []llamaserver.Arg {
	out := slices.Clone(base)
	for _, a := range over {
		if i := slices.IndexFunc(out, func(b llamaserver.Arg) bool { return b.Flag == a.Flag }); i >= 0 {
			out[i] = a
		} else {
			out = append(out, a)
		}
	}
	return out
}

// abs makes path absolute, so the backend finds it from any directory.
func abs(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// Describe is m's llama-server flags as one line, for reports.
func (m Model) Describe() string { return llamaserver.CommandLine(m.Args) }

// hasMmproj reports whether a file name marks a multimodal projector
// (llama-server: the name contains "mmproj").
func hasMmproj(name string) bool { return strings.Contains(name, "mmproj") }
