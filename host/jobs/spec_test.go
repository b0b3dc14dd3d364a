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
