package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Executor names a Spec may give.
const (
	ExecutorLocal = "local"
	ExecutorRay   = "ray"
)

// Spec is a job as submitted to POST /api/jobs, in YAML or JSON (JSON is
// YAML). Keys are the snake_case names below; unknown keys are refused.
type Spec struct {
	// Name is for people; default: Workload.
	Name string `json:"name" yaml:"name"`
	// Workload is the kind of work (ppo, grpo, sft, eval, …): lower-case
	// letters, digits and '-', at most 32, first of the task id. Default
	// "job".
	Workload string `json:"workload" yaml:"workload"`
	// Entrypoint is the shell command line to run (key `command` or
	// `entrypoint`, not both): run with /bin/sh -c locally, Ray's
	// entrypoint on a Ray cluster. Required.
	Entrypoint string `json:"entrypoint" yaml:"entrypoint"`
	// NNodes × GPUsPerNode GPUs are needed at once (the gang). NNodes
	// defaults to 1 and must be 1 for the local executor; GPUsPerNode
	// defaults to 1 and may be 0 (a CPU job).
	NNodes      int `json:"nnodes" yaml:"nnodes"`
	GPUsPerNode int `json:"gpus_per_node" yaml:"gpus_per_node"`
	// Env is added to the job's environment (locally; on Ray, to
	// runtime_env.env_vars).
	Env map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	// RuntimeEnv is Ray's runtime_env, passed as is (Ray executor only;
	// the local executor ignores it).
	RuntimeEnv map[string]any `json:"runtime_env,omitempty" yaml:"runtime_env,omitempty"`
	// Executor is "local" (default) or "ray".
	Executor string `json:"executor" yaml:"executor"`
	// Priority: higher runs first; FIFO within a priority. Default 0.
	Priority int `json:"priority" yaml:"priority"`
	// EvictIdleModels lets a local job stop idle models (never one with
	// requests in flight, never a pinned one) to get its GPUs. Default
	// false: the job waits until its GPUs are free.
	EvictIdleModels bool `json:"evict_idle_models,omitempty" yaml:"evict_idle_models,omitempty"`
}

// FieldError is a spec field that is missing or wrong: the HTTP API
// answers it with 400 and this message, which names the field.
type FieldError struct {
	Field string // the key, e.g. "gpus_per_node"
	Msg   string
	// Line is the 1-based line of the field's key in the spec ParseSpec
	// read; 0 when not known (a spec built in Go, a missing field).
	Line int
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("job spec: line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return "job spec: " + e.Field + ": " + e.Msg
}

// SpecError is a job spec that is not one at all: empty, not valid YAML or
// JSON (Line, when not 0, is the 1-based line the parser stopped at), or
// not a mapping of fields. The HTTP API answers it with 400 and this
// message.
type SpecError struct {
	Line int
	Msg  string
}

func (e *SpecError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("job spec: line %d: %s", e.Line, e.Msg)
	}
	return "job spec: " + e.Msg
}

// yamlLineRE finds the line in yaml.v3's syntax errors ("yaml: line 3: …").
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns the YAML parser's error into a *SpecError naming the
// line.
func syntaxError(err error) *SpecError {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &SpecError{Line: line, Msg: "not valid YAML or JSON: " + m[2]}
	}
	return &SpecError{Msg: "not valid YAML or JSON: " + strings.TrimPrefix(err.Error(), "yaml: ")}
}

var workloadRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// ParseSpec reads a job spec (YAML or JSON) and applies the defaults.
// Errors: *FieldError naming the first bad field (unknown keys, and
// numbers that are not integers where integers are wanted, included);
// *SpecError for input that is not a YAML mapping at all (empty, binary,
// a syntax error with its line, a list).
func ParseSpec(data []byte) (Spec, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return Spec{}, &SpecError{Msg: "empty: want a mapping of fields (name, workload, command, nnodes, gpus_per_node, …)"}
	}
	if !utf8.Valid(data) {
		return Spec{}, &SpecError{Msg: "not valid YAML or JSON: not UTF-8 text (binary input?)"}
	}
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root); err != nil {
		return Spec{}, syntaxError(err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		got := "nothing"
		if len(root.Content) == 1 {
			got = map[yaml.Kind]string{yaml.SequenceNode: "a list", yaml.ScalarNode: "a single value", yaml.AliasNode: "an alias"}[root.Content[0].Kind]
		}
		return Spec{}, &SpecError{Line: max(root.Line, 1), Msg: "want a mapping of fields (name, workload, command, nnodes, gpus_per_node, …), got " + got}
	}
	s := Spec{NNodes: 1, GPUsPerNode: 1, Executor: ExecutorLocal}
	m := root.Content[0]
	lines := map[string]int{} // each key's line, for the errors
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, val := m.Content[i].Value, m.Content[i+1]
		if lines[key] > 0 {
			return Spec{}, &FieldError{key, "given twice", m.Content[i].Line}
		}
		lines[key] = m.Content[i].Line
		seen := func(k string) bool { return lines[k] > 0 }
		var err error
		switch key {
		case "name":
			err = decodeField(val, &s.Name, "a string")
		case "workload":
			err = decodeField(val, &s.Workload, "a string")
		case "command", "entrypoint":
			if seen("command") && seen("entrypoint") {
				return Spec{}, &FieldError{key, "give command or entrypoint, not both", lines[key]}
			}
			err = decodeField(val, &s.Entrypoint, "a string (a shell command line)")
		case "nnodes":
			err = decodeInt(val, &s.NNodes)
		case "gpus_per_node":
			err = decodeInt(val, &s.GPUsPerNode)
		case "env":
			err = decodeField(val, &s.Env, "a mapping of names to strings")
		case "runtime_env":
			err = decodeField(val, &s.RuntimeEnv, "a mapping (Ray's runtime_env)")
		case "executor":
			err = decodeField(val, &s.Executor, "a string")
		case "priority":
			err = decodeInt(val, &s.Priority)
		case "evict_idle_models":
			err = decodeField(val, &s.EvictIdleModels, "true or false")
		default:
			return Spec{}, &FieldError{key, "unknown field; known: name, workload, command (or entrypoint), nnodes, gpus_per_node, env, runtime_env, executor, priority, evict_idle_models", lines[key]}
		}
		if err != nil {
			return Spec{}, &FieldError{key, err.Error(), lines[key]}
		}
	}
	if s.Workload == "" {
		s.Workload = "job"
	}
	if s.Name == "" {
		s.Name = s.Workload
	}
	err := s.Validate()
	var fe *FieldError
	if errors.As(err, &fe) && fe.Line == 0 {
		fe.Line = lines[fe.Field]
		if fe.Field == "command" && fe.Line == 0 {
			fe.Line = lines["entrypoint"]
		}
	}
	return s, err
}

func decodeField(n *yaml.Node, v any, want string) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return fmt.Errorf("want %s, got null", want)
	}
	if err := n.Decode(v); err != nil {
		return fmt.Errorf("want %s", want) // the FieldError names the line
	}
	return nil
}

// decodeInt decodes an integer field. yaml.v3 would truncate a float
// into an int (0.5 → 0: a GPU job made a CPU job); only an integer
// literal is taken.
func decodeInt(n *yaml.Node, v *int) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!float" {
		return fmt.Errorf("want an integer, got %s", n.Value) // the FieldError names the line
	}
	return decodeField(n, v, "an integer")
}

// Validate checks the spec's values (ParseSpec calls it). Errors:
// *FieldError.
func (s *Spec) Validate() error {
	switch {
	case !workloadRE.MatchString(s.Workload):
		return &FieldError{Field: "workload", Msg: fmt.Sprintf("%q: want lower-case letters, digits and '-', at most 32, starting with a letter or digit (it begins the task id)", s.Workload)}
	case strings.TrimSpace(s.Entrypoint) == "":
		return &FieldError{Field: "command", Msg: "required: the shell command line to run"}
	case s.NNodes < 1:
		return &FieldError{Field: "nnodes", Msg: fmt.Sprintf("%d: want at least 1", s.NNodes)}
	case s.GPUsPerNode < 0:
		return &FieldError{Field: "gpus_per_node", Msg: fmt.Sprintf("%d: want 0 or more", s.GPUsPerNode)}
	case s.Executor != ExecutorLocal && s.Executor != ExecutorRay:
		return &FieldError{Field: "executor", Msg: fmt.Sprintf("%q: want %q or %q", s.Executor, ExecutorLocal, ExecutorRay)}
	case s.Executor == ExecutorLocal && s.NNodes != 1:
		return &FieldError{Field: "nnodes", Msg: fmt.Sprintf("%d: the local executor runs on this one box; use executor: ray for more nodes", s.NNodes)}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return &FieldError{Field: "env", Msg: fmt.Sprintf("%q is not a variable name", k)}
		}
		if n := len(k) + 1 + len(s.Env[k]) + 1; n > MaxEnvEntryBytes {
			return &FieldError{Field: "env", Msg: fmt.Sprintf("%s: %d bytes; Linux takes at most %d (128 KiB) for one variable, name and value together: pass a file instead",
				k, n, MaxEnvEntryBytes)}
		}
	}
	return nil
}

// MaxEnvEntryBytes is the most bytes of one variable of a job's
// environment, "NAME=value" and its NUL: Linux's MAX_ARG_STRLEN (32 pages
// of 4 KiB), past which starting the job fails with "argument list too
// long". The command has no such bound: it is passed in a file.
const MaxEnvEntryBytes = 128 << 10
