package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"text/template"

	"github.com/spf13/cobra"
	"golang.org/x/mod/modfile"

	"github.com/loadout-dev/loadout/internal/sdksource"
)

// scaffold holds the files `loadout policy new` writes: common/ for every
// kind, scheduler/ and swapper/ for one. A name ending in .tmpl is a
// text/template (the suffix is dropped); NAME in a file name becomes the
// policy's name; anything else is copied as is.
//
//go:embed all:scaffold
var scaffold embed.FS

// sdkModule is the policy SDK's module path.
const sdkModule = sdksource.SDKModule

// thirdParty is the directory of a new module that the SDK this binary
// carries, and the modules it needs, are unpacked in, each under its
// module path.
const thirdParty = "third_party"

// sdkPlaceholder is the version a module requires of a module it replaces
// with a local directory: any version does, and this one says so.
const sdkPlaceholder = "v0.0.0-00010101000000-000000000000"

// policyNameRE is what a policy's name may be: it names a directory, a
// file (NAME.wasm) and, by default, a Go module.
var policyNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// scaffoldData is what the templates see.
type scaffoldData struct {
	Name       string // the policy's name, e.g. "lru"
	Kind       string // "scheduler" or "swapper"
	Module     string // the new module's path
	GoVersion  string // the go directive
	SDKModule  string
	SDKVersion string // the version required of the SDK
	SDKPath    string // with --sdk-path: the SDK directory the module is replaced by
	// ThirdParty are, with the SDK this binary carries, the replace
	// directives ("gopkg.in/yaml.v3 v3.0.1 => ./third_party/gopkg.in/yaml.v3")
	// that point the SDK and its module graph at the unpacked copies.
	ThirdParty []string
	// SDKRequires are, with --sdk-path, the SDK's own requirements
	// ("gopkg.in/yaml.v3 v3.0.1"), listed as indirect so the module builds
	// without a `go mod tidy`.
	SDKRequires []string
}

type policyNewOptions struct {
	kind, dir, module, sdkPath, sdkVersion string
	// embedded returns the SDK archive this binary carries
	// (sdksource.Embedded), or sdksource.ErrNotEmbedded.
	embedded func() (*sdksource.Archive, error)
}

func newPolicyNewCmd() *cobra.Command {
	o := policyNewOptions{embedded: sdksource.Embedded}
	cmd := &cobra.Command{
		Use:   "new NAME --kind scheduler|swapper",
		Short: "Write a new policy module that builds, passes its tests and passes 'policy check'",
		Long: `new writes DIR/NAME, a Go module of its own that requires only the policy SDK
(` + sdkModule + `), with:

  main.go                a small, commented policy that works: a swapper evicts
                         the least recently used idle models beyond max_running;
                         a scheduler serves requests in arrival order, one load
                         at a time
  NAME_test.go           native tests with sdk/policytest, plain 'go test'
  testdata/scenarios/    the policy's behaviour as scenario files, run natively
                         by the test and in the sandbox by 'loadout policy test'
  Makefile               make (NAME.wasm), make test, make check, make scenarios
  go.mod

  third_party/           the policy SDK this loadout was built with, and the
                         modules it needs, which go.mod's replace directives
                         point at: the module builds offline, and what you
                         build speaks this host's ABI

NAME must not exist yet: nothing is ever overwritten.

With --sdk-path the module uses a local SDK directory (a loadout source
tree's sdk/) instead, and with --sdk-version it requires a released SDK,
which 'go mod tidy' then fetches. A loadout built without its SDK (a bare
'go build' rather than 'make build') needs one of the two.

Next steps are printed; docs/POLICIES.md walks through writing, testing,
comparing ('loadout simulate --compare') and deploying a policy.`,
		Example: `  loadout policy new lru --kind swapper
  loadout policy new fair --kind scheduler --dir ~/src --module example.com/policies/fair
  loadout policy new lru --kind swapper --sdk-path ~/src/loadout/sdk`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, data, err := writePolicyModule(args[0], o)
			if err != nil {
				return err
			}
			printNextSteps(cmd.OutOrStdout(), dir, data)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.kind, "kind", "", "scheduler (the queue and who is served) or swapper (who is evicted); required")
	fl.StringVar(&o.dir, "dir", ".", "the directory to create NAME in")
	fl.StringVar(&o.module, "module", "", "the new module's path (default NAME)")
	fl.StringVar(&o.sdkPath, "sdk-path", "", "a local SDK directory (a loadout source tree's sdk/) to build against, by a replace directive")
	fl.StringVar(&o.sdkVersion, "sdk-version", "", "a released SDK version to require, fetched by 'go mod tidy' (default: the SDK this loadout carries, unpacked in third_party/)")
	return cmd
}

// writePolicyModule writes the module and returns its directory and what
// its templates saw. A directory that exists already is refused, and a
// failure removes what was written.
func writePolicyModule(name string, o policyNewOptions) (string, scaffoldData, error) {
	if !policyNameRE.MatchString(name) {
		return "", scaffoldData{}, fmt.Errorf("policy name %q: use lower-case letters, digits, '-' and '_', starting with a letter (it names a directory and NAME.wasm)", name)
	}
	if o.kind != "scheduler" && o.kind != "swapper" {
		return "", scaffoldData{}, fmt.Errorf("--kind: want scheduler or swapper, got %q", o.kind)
	}
	mod, err := scaffoldModule(name, o.module)
	if err != nil {
		return "", scaffoldData{}, err
	}
	if err := scaffoldRequire(sdkModule, "sdk-version", o.sdkVersion, "sdk-path", o.sdkPath); err != nil {
		return "", scaffoldData{}, err
	}
	data := scaffoldData{Name: name, Kind: o.kind, Module: mod, GoVersion: goVersion(), SDKModule: sdkModule}
	dir := filepath.Join(o.dir, name)
	var sdkSum []byte
	var archive *sdksource.Archive
	switch {
	case o.sdkPath != "":
		abs, reqs, sum, err := checkSDKPath(o.sdkPath)
		if err != nil {
			return "", data, err
		}
		data.SDKPath, data.SDKVersion, data.SDKRequires, sdkSum = abs, sdkPlaceholder, reqs, sum
	case o.sdkVersion != "":
		data.SDKVersion = o.sdkVersion
	default:
		var err error
		if archive, err = o.embedded(); err != nil {
			if !errors.Is(err, sdksource.ErrNotEmbedded) {
				return "", data, err
			}
			v, ok := releasedSDKVersion()
			if !ok {
				return "", data, fmt.Errorf("this loadout (version %s) carries no policy SDK (it was built with a bare `go build`; `make build` embeds it) "+
					"and names no released one: pass --sdk-path with a source tree's sdk directory (e.g. --sdk-path ~/src/loadout/sdk), or --sdk-version", version)
			}
			data.SDKVersion = v
		}
	}
	err = newModuleDir(o.dir, dir, func() error { return fillPolicyModule(dir, &data, archive, sdkSum) })
	return dir, data, err
}

// newModuleDir makes dir, a new module's directory, in parent (made if
// need be) and fills it: a directory that exists, even empty, is refused
// and nothing in it is touched; a fill that fails removes what it wrote.
// policy new and backend new both make their modules through it.
func newModuleDir(parent, dir string, fill func() error) error {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	// Mkdir, not MkdirAll: the refusal of a directory that exists.
	if err := os.Mkdir(dir, 0o755); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s already exists; pick another name or --dir (nothing was written)", dir)
	} else if err != nil {
		return err
	}
	if err := fill(); err != nil {
		os.RemoveAll(dir) // made above, empty: nothing of the user's is in it
		return err
	}
	return nil
}

// writeFiles writes files, by their slash-separated path, under dir.
func writeFiles(dir string, files map[string][]byte) error {
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// fillPolicyModule writes the new module's files into the empty dir: the
// rendered scaffold and, with archive, the SDK it unpacks in third_party/
// (the module's go.mod then replaces the SDK's module graph with it).
func fillPolicyModule(dir string, data *scaffoldData, archive *sdksource.Archive, sdkSum []byte) error {
	if archive != nil {
		if err := archive.Unpack(filepath.Join(dir, thirdParty)); err != nil {
			return err
		}
		local := "./" + thirdParty + "/" + sdkModule
		_, reqs, sum, err := checkSDKPath(filepath.Join(dir, filepath.FromSlash(local)))
		if err != nil {
			return fmt.Errorf("the embedded SDK: %w", err)
		}
		data.SDKVersion, data.SDKRequires, sdkSum = sdkPlaceholder, reqs, sum
		for _, m := range archive.Modules {
			from := m.Path
			if m.Version != "" {
				from += " " + m.Version
			}
			data.ThirdParty = append(data.ThirdParty, from+" => ./"+thirdParty+"/"+m.Path)
		}
	}
	files, err := renderScaffold(*data)
	if err != nil {
		return err
	}
	if sdkSum != nil {
		// The SDK's own dependencies' checksums, so the tests build
		// without fetching anything; the SDK itself is a local directory.
		files["go.sum"] = sdkSum
	}
	return writeFiles(dir, files)
}

// renderScaffold renders the files of data.Kind, by their path in the new
// module.
func renderScaffold(data scaffoldData) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, root := range []string{"scaffold/common", "scaffold/" + data.Kind} {
		err := fs.WalkDir(scaffold, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := scaffold.ReadFile(p)
			if err != nil {
				return err
			}
			rel := strings.ReplaceAll(strings.TrimPrefix(p, root+"/"), "NAME", data.Name)
			if strings.HasSuffix(rel, ".tmpl") {
				rel = strings.TrimSuffix(rel, ".tmpl")
				t, err := template.New(path.Base(p)).Option("missingkey=error").Parse(string(b))
				if err != nil {
					return fmt.Errorf("scaffold %s: %w", p, err)
				}
				var out bytes.Buffer
				if err := t.Execute(&out, data); err != nil {
					return fmt.Errorf("scaffold %s: %w", p, err)
				}
				b = out.Bytes()
			}
			files[rel] = b
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// checkSDKPath checks that dir is the SDK module's directory and returns
// its absolute path, its requirements ("path version") and its go.sum.
func checkSDKPath(dir string) (abs string, reqs []string, sum []byte, err error) {
	abs, err = filepath.Abs(dir)
	if err != nil {
		return "", nil, nil, err
	}
	gomod := filepath.Join(abs, "go.mod")
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", nil, nil, fmt.Errorf("--sdk-path %s: %w", dir, err)
	}
	f, err := modfile.ParseLax(gomod, b, nil)
	if err != nil {
		return "", nil, nil, fmt.Errorf("--sdk-path %s: %w", dir, err)
	}
	if f.Module == nil || f.Module.Mod.Path != sdkModule {
		return "", nil, nil, fmt.Errorf("--sdk-path %s: its go.mod is not module %s", dir, sdkModule)
	}
	for _, r := range f.Require {
		reqs = append(reqs, r.Mod.Path+" "+r.Mod.Version)
	}
	sum, err = os.ReadFile(filepath.Join(abs, "go.sum"))
	if errors.Is(err, fs.ErrNotExist) {
		return abs, reqs, []byte{}, nil
	}
	return abs, reqs, sum, err
}

// releaseRE matches a release version, as set at link time (-X
// main.version=v0.4.0).
var releaseRE = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

// releasedSDKVersion is the SDK version this binary speaks: the one its
// build required, when that is a real version, else the binary's own
// release version (the SDK is tagged sdk/vX.Y.Z with each release, so the
// two agree). A binary built from a source tree has neither: ok is false.
func releasedSDKVersion() (v string, ok bool) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == sdkModule && dep.Replace == nil && dep.Version != sdkPlaceholder && dep.Version != "" {
				return dep.Version, true
			}
		}
	}
	if releaseRE.MatchString(version) {
		return version, true
	}
	return "", false
}

// goVersion is the go directive of a new module: the toolchain this
// binary was built with, which built its SDK too.
func goVersion() string {
	if v, ok := strings.CutPrefix(runtime.Version(), "go"); ok && regexp.MustCompile(`^\d+\.\d+(\.\d+)?$`).MatchString(v) {
		return v
	}
	return "1.26"
}

func printNextSteps(out io.Writer, dir string, data scaffoldData) {
	name := data.Name
	contents := "main.go, " + name + "_test.go, testdata/scenarios/, Makefile, go.mod"
	if data.ThirdParty != nil {
		contents += ", " + thirdParty + "/ (the SDK)"
	}
	fmt.Fprintf(out, "wrote %s: a %s policy module (%s)\n\nnext:\n", dir, data.Kind, contents)
	fmt.Fprintf(out, "  cd %s\n", dir)
	if data.SDKPath == "" && data.ThirdParty == nil {
		fmt.Fprintf(out, "  go mod tidy                  # fetches the SDK\n")
	}
	fmt.Fprintf(out, "  make test                    # go vet and the native tests, scenarios included\n")
	fmt.Fprintf(out, "  make                         # builds %s.wasm\n", name)
	fmt.Fprintf(out, "  loadout policy check %s.wasm\n", name)
	fmt.Fprintf(out, "  loadout policy test %s.wasm testdata/scenarios/*.yaml\n", name)
	fmt.Fprintf(out, "\nthen see docs/POLICIES.md: comparing it on a trace, and deploying it.\n")
}
