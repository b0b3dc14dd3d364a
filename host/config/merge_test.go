package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// loadFiles writes files (name → text) in a temporary directory and loads
// them in the order given by names, returning the configuration and the
// error lines with the directory trimmed from their names.
func loadFiles(t *testing.T, names []string, files map[string]string) (*Config, []string) {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[n]), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	cfg, _, err := LoadFiles(paths, Options{})
	if err == nil {
		return cfg, nil
	}
	var list Errors
	if !errors.As(err, &list) {
		t.Fatalf("error is %T, want Errors: %v", err, err)
	}
	var lines []string
	for _, e := range list {
		lines = append(lines, strings.ReplaceAll(e.Error(), dir+string(filepath.Separator), ""))
	}
	return nil, lines
}

// A configuration split over files is one configuration: models from
// each, lists concatenated, a setting repeated with its value, and a
// group in one file naming models of another (llama-swap's -config-dir).
func TestLoadFiles_MergesFiles(t *testing.T) {
	cfg, errs := loadFiles(t, []string{"main.yaml", "d/10-b.yaml", "d/20-c.yaml"}, map[string]string{
		"main.yaml": `
healthCheckTimeout: 60
apiKeys: [k1]
models:
  a: {backend: sim}
hooks:
  on_startup:
    preload: [a]
`,
		"d/10-b.yaml": `
healthCheckTimeout: 60
apiKeys: [k2]
models:
  b: {backend: sim}
groups:
  pair: {swap: false, members: [a, b]}
`,
		"d/20-c.yaml": `
# only one model here
models:
  c: {backend: sim}
hooks:
  on_startup:
    preload: [c]
`,
	})
	if errs != nil {
		t.Fatalf("errors: %v", errs)
	}
	if got := cfg.ModelIDs(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("models %v, want a b c", got)
	}
	eq(t, "apiKeys", cfg.APIKeys, []string{"k1", "k2"})
	eq(t, "preload", cfg.Preload, []string{"a", "c"})
	eq(t, "healthCheckTimeout", cfg.HealthCheckTimeout.Seconds(), 60.0)
	if ga, gb := cfg.GroupOf("a"), cfg.GroupOf("b"); ga == nil || ga.Name != "pair" || ga != gb {
		t.Errorf("groups: a in %v, b in %v, want both in pair", ga, gb)
	}
	if len(cfg.Files) != 3 || !strings.HasSuffix(cfg.File, "main.yaml") || cfg.Files[0] != cfg.File {
		t.Errorf("File %q, Files %v", cfg.File, cfg.Files)
	}
	if r := Report(cfg, nil); !strings.Contains(strings.SplitN(r, "\n", 2)[0], "+ 2 files") {
		t.Errorf("the report's first line does not name the other files: %q", strings.SplitN(r, "\n", 2)[0])
	}
}

// What cannot merge is an error at the later file's line naming the
// earlier place, and every other error names the file it is in.
func TestLoadFiles_Errors(t *testing.T) {
	_, errs := loadFiles(t, []string{"main.yaml", "d/b.yaml"}, map[string]string{
		"main.yaml": `
healthCheckTimeout: 60
apiKeys: [k1]
models:
  a: {backend: sim}
  b: {backend: sim, aliases: [bee]}
`,
		"d/b.yaml": `
healthCheckTimeout: 90
models:
  b: {backend: sim}
  c: {backend: sim, ttl: soon, aliases: [bee]}
apiKeys: {key: x}
`,
	})
	eq(t, "errors", errs, []string{
		`d/b.yaml:2:21: healthCheckTimeout: "90" here, "60" at main.yaml:2: a setting in more than one file must have one value`,
		`d/b.yaml:4:3: models.b: already defined at main.yaml:6: each entry of models is defined in one file`,
		`d/b.yaml:5:26: models.c.ttl: want a whole number of seconds, got "soon"`,
		`d/b.yaml:5:42: models.c.aliases[0]: alias "bee" of model c is already an alias of model b (main.yaml:6)`,
		`d/b.yaml:6:10: apiKeys: a mapping here, a list at main.yaml:3: a setting in more than one file must be of one kind`,
	})
}

// DirFiles reads a --config-dir as llama-swap does: its *.yml and *.yaml
// files, by name, not its subdirectories or other files; a named pipe
// there is an error, not a read that never ends.
func TestDirFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.yml", "a.yaml", "notes.txt", "c.yaml.bak", "sub/d.yaml"} {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("models: {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := DirFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "files", got, []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml")})
	if _, err := DirFiles(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing directory is no error")
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DirFiles(dir); err == nil || !strings.Contains(err.Error(), "pipe.yaml is not a regular file") {
		t.Errorf("a named pipe in the directory: %v", err)
	}
	if _, _, err := LoadFiles([]string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, ".", "a.yaml")}, Options{}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a file given twice: %v", err)
	}
	if _, _, err := LoadFiles([]string{dir}, Options{}); err == nil || !strings.Contains(err.Error(), "--config-dir") {
		t.Errorf("a directory given as the file: %v", err)
	}
}
