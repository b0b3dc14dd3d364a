package jobs

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSpec_YAMLAndJSONDefaults(t *testing.T) {
	for _, in := range []string{
		"workload: sft\ncommand: python train.py\ngpus_per_node: 2\nenv: {A: b}\n",
		`{"workload":"sft","entrypoint":"python train.py","gpus_per_node":2,"env":{"A":"b"}}`,
	} {
		s, err := ParseSpec([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if s.Name != "sft" || s.Entrypoint != "python train.py" || s.NNodes != 1 || s.GPUsPerNode != 2 ||
			s.Executor != ExecutorLocal || s.Env["A"] != "b" {
			t.Fatalf("%s: got %+v", in, s)
		}
	}
}

func TestParseSpec_BadFieldNamed(t *testing.T) {
	for in, field := range map[string]string{
		"command: x\ngpus_per_node: two\n":           "gpus_per_node",
		"command: x\nnodes: 2\n":                     "nodes",
		"workload: Big Job\ncommand: x\n":            "workload",
		"gpus_per_node: 1\n":                         "command",
		"command: x\nexecutor: k8s\n":                "executor",
		"command: x\nnnodes: 2\n":                    "nnodes",
		"command: x\nentrypoint: y\n":                "entrypoint",
		"command: x\nenv: [a]\n":                     "env",
		"command: x\ngpus_per_node: -1\n":            "gpus_per_node",
		"command: x\nevict_idle_models: sometimes\n": "evict_idle_models",
	} {
		_, err := ParseSpec([]byte(in))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%q: got %v, want a FieldError for %s", in, err, field)
		}
	}
	if _, err := ParseSpec([]byte("- a\n- b\n")); err == nil || !strings.Contains(err.Error(), "mapping") {
		t.Errorf("a list: got %v", err)
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add([]byte("workload: sft\ncommand: x\n"))
	f.Add([]byte(`{"command":"x","nnodes":2,"executor":"ray"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpec(b)
		if err == nil {
			if verr := s.Validate(); verr != nil {
				t.Fatalf("accepted a spec Validate refuses: %v", verr)
			}
		}
	})
}

// Integers are integers: yaml.v3 truncates a float into an int (0.5 → 0,
// a GPU job made a CPU job), so a fraction is refused, naming the field.
func TestParseSpec_FractionalIntegerRefused(t *testing.T) {
	for in, field := range map[string]string{
		"command: x\ngpus_per_node: 0.5\n":       "gpus_per_node",
		"command: x\ngpus_per_node: 1.9\n":       "gpus_per_node",
		`{"command":"x","gpus_per_node":2.0}`:    "gpus_per_node",
		"command: x\nexecutor: ray\nnnodes: 1.5": "nnodes",
		`{"command":"x","priority":0.1}`:         "priority",
	} {
		_, err := ParseSpec([]byte(in))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field || !strings.Contains(fe.Msg, "want an integer") {
			t.Errorf("%q: got %v, want a FieldError for %s wanting an integer", in, err, field)
		}
	}
}

// Input that is no spec at all is a *SpecError saying what is wrong (the
// API's 400), with the line of a syntax error.
func TestParseSpec_NotASpecIsASpecError(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{" \n\t\n", "empty"},
		{`[{"command":"x"}]`, "got a list"},
		{"- a\n- b\n", "got a list"},
		{"just words", "got a single value"},
		{"\x00\x01\x02\xff\xfe", "not valid YAML or JSON"},
		{"\x00\x01\x02binary", "not valid YAML or JSON"},
		{"command: x\ngpus_per_node: 1\n  bad: : :\n", "line 3"},
		{`{"command": "x",`, "not valid YAML or JSON"},
	} {
		_, err := ParseSpec([]byte(tc.in))
		var se *SpecError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a SpecError saying %q", tc.in, err, tc.want)
		}
	}
}

// A field error in a YAML or JSON spec names the line of the field's key,
// whether the parser (a wrong type, an unknown or repeated key) or
// Validate (a value out of range) found it; a missing field has no line.
func TestParseSpec_FieldErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"command: x\ngpus_per_node: -1\n", "job spec: line 2: gpus_per_node: -1: want 0 or more"},
		{"command: x\ngpus_per_node: two\n", "job spec: line 2: gpus_per_node: want an integer"},
		{"command: x\n\nbogus: 1\n", "job spec: line 3: bogus: unknown field"},
		{"command: x\nnnodes: 1\nnnodes: 2\n", "job spec: line 3: nnodes: given twice"},
		{"name: a\nworkload: Bad\ncommand: x\n", "job spec: line 2: workload:"},
		{"executor: local\nnnodes: 2\ncommand: x\n", "job spec: line 2: nnodes: 2: the local executor"},
		{"{\"command\": \"x\",\n \"env\": {\"A=B\": \"c\"}}", "job spec: line 2: env:"},
		{"entrypoint: ' '\n", "job spec: line 1: command: required"},
		{"name: a\n", "job spec: command: required"},
	} {
		_, err := ParseSpec([]byte(tc.in))
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want a FieldError starting %q", tc.in, err, tc.want)
		}
	}
}

// A field error names its line once, in front: the value's decoder does
// not repeat it.
func TestParseSpec_FieldErrorNamesTheLineOnce(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"command: x\ngpus_per_node: 0.5\n", "job spec: line 2: gpus_per_node: want an integer, got 0.5"},
		{"command: x\ngpus_per_node: two\n", "job spec: line 2: gpus_per_node: want an integer"},
		{"command: x\nenv: [a]\n", "job spec: line 2: env: want a mapping of names to strings"},
	} {
		if _, err := ParseSpec([]byte(tc.in)); err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %q", tc.in, err, tc.want)
		}
	}
}

// An env variable over Linux's bound on one (MaxEnvEntryBytes) is refused
// at submit, naming the bound, not accepted to fail at start.
func TestParseSpec_EnvOverTheArgumentBoundRefused(t *testing.T) {
	_, err := ParseSpec([]byte("command: x\nenv: {BIG: " + strings.Repeat("x", MaxEnvEntryBytes) + "}\n"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "env" || !strings.Contains(err.Error(), "128 KiB") || fe.Line != 2 {
		t.Fatalf("got %v, want a FieldError of env on line 2 naming the 128 KiB bound", err)
	}
}
