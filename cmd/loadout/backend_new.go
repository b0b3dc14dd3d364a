package main

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"
	"text/template"

	"github.com/loadout-dev/loadout/plugins"
	"github.com/spf13/cobra"
	"golang.org/x/mod/modfile"
)

// backendScaffold holds the files `loadout backend new` writes: the source
// of examples/llamacpp-python, with the backend's name a template field
// (TestBackendNew_MatchesExample keeps the two in step). A name ending in
// .tmpl is a text/template; the suffix is dropped.
//
//go:embed backend_scaffold
var backendScaffold embed.FS

// pluginsDir is where `backend new` writes the embedded plugins module
// (plugins.Source) inside the new module, when no released version of it
// is known.
const pluginsDir = "loadout-plugins"

// backendScaffoldData is what the backend templates see.
type backendScaffoldData struct {
	Name, Module, GoVersion string
	PluginsModule           string
	PluginsVersion          string // the version required of the plugins module
	PluginsPath             string // the replace directive's directory, if any
	PluginsFrom             string // where that directory came from, for a comment
	PluginsRequires         []string
}

type backendNewOptions struct {
	dir, module, pluginsPath, pluginsVersion string
}

func newBackendNewCmd() *cobra.Command {
	var o backendNewOptions
	cmd := &cobra.Command{
		Use:   "new NAME",
		Short: "Write a new backend plugin module that builds, passes its tests and passes 'backend check'",
		Long: `new writes DIR/NAME, a Go module of its own that requires only the backend
plugin protocol (` + plugins.ModulePath + `): a working backend for
llama-cpp-python's OpenAI server (python3 -m llama_cpp.server), the same code
as Loadout's examples/llamacpp-python, to adapt to your server:

  main.go          plugins.Serve(New(...)), and the options it reads
  backend.go       the plugins.Backend: processes, readiness, stop, estimates
  options.go       the options, their validation (every unknown key named)
                   and the server's command line
  backend_test.go  Validate's problems, and a real server when llama-cpp-python
                   is installed
  Makefile         make, make test, make check
  go.mod

The module requires the protocol module at the version this loadout was
released with. A loadout built from a source tree has none to name: the
protocol module it was built with is then written into NAME/` + pluginsDir + `
and the new module replaces the protocol module with it, so it builds
offline. --plugins-path names another directory (a loadout source tree's
plugins/), --plugins-version a released version.

docs/BACKENDS.md walks through writing, testing and deploying a backend.`,
		Example: `  loadout backend new myserver
  loadout backend new myserver --dir ~/src --module example.com/backends/myserver`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := writeBackendModule(args[0], o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s: a backend plugin module (main.go, backend.go, options.go, backend_test.go, Makefile, go.mod)\n\nnext:\n", dir)
			fmt.Fprintf(out, "  cd %s\n", dir)
			if o.pluginsPath == "" && o.pluginsVersion != "" {
				fmt.Fprintf(out, "  go mod tidy                  # fetches the protocol module\n")
			}
			fmt.Fprintf(out, "  make test                    # go vet and the tests\n")
			fmt.Fprintf(out, "  make                         # builds ./%s\n", args[0])
			fmt.Fprintf(out, "  loadout backend check ./%s --options '{\"model\": \"/path/to/model.gguf\"}'\n", args[0])
			fmt.Fprintf(out, "\nthen name ./%s as a model's backend: in a config; see docs/BACKENDS.md.\n", args[0])
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.dir, "dir", ".", "the directory to create NAME in")
	fl.StringVar(&o.module, "module", "", "the new module's path (default NAME)")
	fl.StringVar(&o.pluginsPath, "plugins-path", "", "a local plugins module directory (a loadout source tree's plugins/) to build against, by a replace directive")
	fl.StringVar(&o.pluginsVersion, "plugins-version", "", "the plugins module version to require (default: the one this loadout was released with)")
	return cmd
}

// writeBackendModule writes the module and returns its directory.
func writeBackendModule(name string, o backendNewOptions) (string, error) {
	if !policyNameRE.MatchString(name) {
		return "", fmt.Errorf("backend name %q: use lower-case letters, digits, '-' and '_', starting with a letter (it names a directory and the binary)", name)
	}
	mod, err := scaffoldModule(name, o.module)
	if err != nil {
		return "", err
	}
	if err := scaffoldRequire(plugins.ModulePath, "plugins-version", o.pluginsVersion, "plugins-path", o.pluginsPath); err != nil {
		return "", err
	}
	data := backendScaffoldData{Name: name, Module: mod, GoVersion: goVersion(), PluginsModule: plugins.ModulePath}
	dir := filepath.Join(o.dir, name)
	files := map[string][]byte{}
	var src fs.FS // the plugins module the new one is built against, if local
	switch {
	case o.pluginsPath != "":
		abs, err := filepath.Abs(o.pluginsPath)
		if err != nil {
			return "", err
		}
		src, data.PluginsPath, data.PluginsFrom = os.DirFS(abs), abs, "--plugins-path"
	case o.pluginsVersion != "":
		data.PluginsVersion = o.pluginsVersion
	default:
		if v := releasedPluginsVersion(); v != "" {
			data.PluginsVersion = v
			break
		}
		src, data.PluginsPath, data.PluginsFrom = plugins.Source, "./"+pluginsDir, "the loadout binary that wrote this module (loadout "+version+")"
		err := fs.WalkDir(plugins.Source, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := fs.ReadFile(plugins.Source, p)
			files[pluginsDir+"/"+p] = b
			return err
		})
		if err != nil {
			return "", err
		}
	}
	if src != nil {
		data.PluginsVersion = sdkPlaceholder
		gomod, err := fs.ReadFile(src, "go.mod")
		if err != nil {
			return "", fmt.Errorf("plugins module: %w", err)
		}
		f, err := modfile.ParseLax("go.mod", gomod, nil)
		if err != nil || f.Module == nil || f.Module.Mod.Path != plugins.ModulePath {
			return "", fmt.Errorf("plugins module %s: its go.mod is not module %s", data.PluginsPath, plugins.ModulePath)
		}
		for _, r := range f.Require {
			data.PluginsRequires = append(data.PluginsRequires, r.Mod.Path+" "+r.Mod.Version)
		}
		// The protocol module's dependencies' checksums, so the new module
		// builds without fetching anything.
		if files["go.sum"], err = fs.ReadFile(src, "go.sum"); err != nil {
			return "", fmt.Errorf("plugins module: %w", err)
		}
	}
	err = fs.WalkDir(backendScaffold, "backend_scaffold", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := backendScaffold.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimSuffix(strings.TrimPrefix(p, "backend_scaffold/"), ".tmpl")
		t, err := template.New(path.Base(p)).Option("missingkey=error").Parse(string(b))
		if err != nil {
			return fmt.Errorf("scaffold %s: %w", p, err)
		}
		var out bytes.Buffer
		if err := t.Execute(&out, data); err != nil {
			return fmt.Errorf("scaffold %s: %w", p, err)
		}
		files[rel] = out.Bytes()
		return nil
	})
	if err != nil {
		return "", err
	}
	return dir, newModuleDir(o.dir, dir, func() error { return writeFiles(dir, files) })
}

// releasedPluginsVersion is the plugins module version this binary was
// built with, when that is a released one (not replaced by a directory),
// else the binary's own release version (the module is tagged plugins/vX.Y.Z
// with each release); "" for a binary built from a source tree.
func releasedPluginsVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == plugins.ModulePath && dep.Replace == nil && dep.Version != sdkPlaceholder && dep.Version != "" {
				return dep.Version
			}
		}
	}
	if releaseRE.MatchString(version) {
		return version
	}
	return ""
}
