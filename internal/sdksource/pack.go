package sdksource

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// WriteArchive packs the SDK module in sdkDir and every module of its
// module graph (`go list -m all` there, their source from the module
// cache) into a zip at out, replacing it: each module's files under its
// module path, without tests (*_test.go, testdata/), nested modules or
// hidden files, and a go.mod made for a module that has none, as the go
// command does. The archive is reproducible: entries sorted, times zero.
// A module of the graph missing from the module cache (a test-only
// dependency the build never fetched) is downloaded first (`go mod
// download`); it fails when that or the go command fails.
func WriteArchive(sdkDir, out string) error {
	mods, err := listModules(sdkDir)
	if err != nil {
		return err
	}
	// The SDK (the main module) first, then by path.
	slices.SortFunc(mods, func(a, b listed) int {
		if a.Main != b.Main {
			if a.Main {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Path, b.Path)
	})
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var manifest strings.Builder
	for _, m := range mods {
		v := m.Version
		if m.Main {
			v = "-"
		}
		fmt.Fprintf(&manifest, "%s %s\n", m.Path, v)
		if err := addModule(zw, m.Path, m.Dir); err != nil {
			return err
		}
	}
	if err := addFile(zw, manifestName, strings.NewReader(manifest.String())); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// addModule adds the files of the module at dir under modPath/.
func addModule(zw *zip.Writer, modPath, dir string) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != dir && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || exists(filepath.Join(p, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, ".") || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(files)
	if !slices.Contains(files, "go.mod") {
		if err := addFile(zw, path.Join(modPath, "go.mod"), strings.NewReader("module "+modPath+"\n")); err != nil {
			return err
		}
	}
	for _, rel := range files {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		err = addFile(zw, path.Join(modPath, rel), f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func addFile(zw *zip.Writer, name string, r io.Reader) error {
	w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: time.Time{}})
	if err != nil {
		return err
	}
	_, err = io.Copy(w, r)
	return err
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// listed is one module of the SDK's graph as `go list -m -json` names it.
type listed struct {
	Path, Version, Dir string
	Main               bool
}

// listModules lists the module graph of the SDK in sdkDir (`go list -m
// all`), downloading first the modules the module cache lacks: `go build`
// fetches only what it compiles, not a dependency's test-only modules.
func listModules(sdkDir string) ([]listed, error) {
	for pass := 0; ; pass++ {
		cmd := exec.Command("go", "list", "-m", "-json", "all")
		cmd.Dir = sdkDir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		listing, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list -m all in %s: %v\n%s", sdkDir, err, stderr.Bytes())
		}
		var mods []listed
		var missing []string
		for dec := json.NewDecoder(bytes.NewReader(listing)); dec.More(); {
			var m listed
			if err := dec.Decode(&m); err != nil {
				return nil, fmt.Errorf("go list -m all in %s: %w", sdkDir, err)
			}
			if m.Main && m.Path != SDKModule {
				return nil, fmt.Errorf("%s is module %s, not %s", sdkDir, m.Path, SDKModule)
			}
			if m.Dir == "" {
				missing = append(missing, m.Path+"@"+m.Version)
			}
			mods = append(mods, m)
		}
		if len(missing) == 0 {
			return mods, nil
		}
		if pass > 0 {
			return nil, fmt.Errorf("modules %v are not in the module cache after go mod download in %s", missing, sdkDir)
		}
		dl := exec.Command("go", append([]string{"mod", "download"}, missing...)...)
		dl.Dir = sdkDir
		if out, err := dl.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go mod download %v in %s: %v\n%s", missing, sdkDir, err, out)
		}
	}
}
