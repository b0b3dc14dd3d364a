package sdksource

import (
	"archive/zip"
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

//go:embed archive
var archive embed.FS

// archiveName is the archive's name in the embedded directory.
const archiveName = "archive/sdk.zip"

// manifestName is the archive's list of modules: one "path version" line
// each, the SDK first with version "-".
const manifestName = "modules.txt"

// SDKModule is the policy SDK's module path.
const SDKModule = "github.com/loadout-dev/loadout/sdk"

// ErrNotEmbedded is returned by Embedded for a binary built without the
// archive (`go build ./cmd/loadout` before `make build` wrote it).
var ErrNotEmbedded = errors.New("this loadout was built without its policy SDK (build it with `make build`, which embeds it)")

// Module is one module in the archive.
type Module struct {
	Path    string // module path, e.g. "gopkg.in/yaml.v3"
	Version string // e.g. "v3.0.1"; "" for the SDK itself
}

// Archive is an SDK archive: the SDK and the modules of its module graph.
type Archive struct {
	zr      *zip.Reader
	Modules []Module // the SDK first, then the rest sorted by path
}

// Embedded returns the archive this binary carries, or ErrNotEmbedded.
func Embedded() (*Archive, error) {
	b, err := archive.ReadFile(archiveName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotEmbedded
	}
	if err != nil {
		return nil, err
	}
	return Read(b)
}

// Read opens an archive WriteArchive wrote; an error says what is wrong
// with it.
func Read(b []byte) (*Archive, error) {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, fmt.Errorf("the embedded SDK archive: %w", err)
	}
	f, err := zr.Open(manifestName)
	if err != nil {
		return nil, fmt.Errorf("the embedded SDK archive: %w", err)
	}
	defer f.Close()
	a := &Archive{zr: zr}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			return nil, fmt.Errorf("the embedded SDK archive: %s: bad line %q", manifestName, sc.Text())
		}
		if v == "-" {
			v = ""
		}
		a.Modules = append(a.Modules, Module{Path: p, Version: v})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(a.Modules) == 0 || a.Modules[0].Path != SDKModule {
		return nil, fmt.Errorf("the embedded SDK archive: %s does not start with %s", manifestName, SDKModule)
	}
	return a, nil
}

// Unpack writes every module of a into dir, each in the directory its
// module path names (dir/github.com/loadout-dev/loadout/sdk,
// dir/gopkg.in/yaml.v3, …), creating dir. A file already there is an
// error, never overwritten. Files are written 0644, directories 0755.
func (a *Archive) Unpack(dir string) error {
	for _, f := range a.zr.File {
		if f.Name == manifestName || strings.HasSuffix(f.Name, "/") {
			continue
		}
		if !filepath.IsLocal(f.Name) || path.Clean(f.Name) != f.Name {
			return fmt.Errorf("the embedded SDK archive: bad file name %q", f.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := writeFile(p, f); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(p string, f *zip.File) error {
	r, err := f.Open()
	if err != nil {
		return fmt.Errorf("the embedded SDK archive: %s: %w", f.Name, err)
	}
	defer r.Close()
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
