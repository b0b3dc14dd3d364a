package routermode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// dirEntry is one model of a models directory.
type dirEntry struct {
	id, file      string // its name; the GGUF or subdirectory it came from
	model, mmproj string // absolute paths; mmproj may be ""
}

// splitFirst marks the first part of a split GGUF (llama-server's rule).
const splitFirst = "-00001-of-"

// scanDir lists the models of a models directory by llama-server's rules
// (see the package comment).
func scanDir(dir string) ([]dirEntry, []Warning, error) {
	fail := func(format string, a ...any) error {
		return &Error{File: dir, Message: "models dir: " + fmt.Sprintf(format, a...)}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, nil, fail("does not exist or is not a directory")
	}
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, nil, fail("%v", errors.Unwrap(err))
	}
	var (
		found []dirEntry
		warns []Warning
		errs  []error
		seen  = map[string]string{}
	)
	add := func(e dirEntry) {
		if first, ok := seen[e.id]; ok {
			errs = append(errs, fail("model %s is defined twice, by %s and by %s; llama-server would keep one of them", e.id, first, e.file))
			return
		}
		seen[e.id] = e.file
		found = append(found, e)
	}
	for _, de := range entries {
		path := filepath.Join(dir, de.Name())
		st, err := os.Stat(path) // follows symbolic links, as llama-server does
		if err != nil {
			continue
		}
		if st.IsDir() {
			e, w, ok := scanSubdir(path, de.Name())
			warns = append(warns, w...)
			if ok {
				add(e)
			}
			continue
		}
		name := de.Name()
		if !strings.HasSuffix(name, ".gguf") || hasMmproj(name) {
			continue
		}
		if strings.Contains(name, "-of-") && !strings.Contains(name, splitFirst) && isSplitPart(name) {
			warns = append(warns, Warning{File: path, Message: "a later part of a split model at the top of the models dir: llama-server lists it as a model of its own, and so does Loadout; put a split model's parts in a subdirectory"})
		}
		add(dirEntry{id: strings.ReplaceAll(name, ".gguf", ""), file: path, model: abs(path)})
	}
	if len(found) == 0 && len(errs) == 0 {
		errs = append(errs, fail("holds no GGUF model (FILE.gguf, or a subdirectory holding one)"))
	}
	return found, warns, errors.Join(errs...)
}

// scanSubdir reads one subdirectory: a multimodal or split model.
func scanSubdir(dir, name string) (dirEntry, []Warning, bool) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return dirEntry{}, []Warning{{File: dir, Message: fmt.Sprintf("models dir: skipped: %v", err)}}, false
	}
	var first, mmproj string
	var others []string
	for _, de := range entries {
		n := de.Name()
		if de.IsDir() || !strings.HasSuffix(n, ".gguf") {
			continue
		}
		switch {
		case hasMmproj(n):
			if mmproj == "" {
				mmproj = n
			}
		case strings.Contains(n, splitFirst):
			first = n
		default:
			others = append(others, n)
		}
	}
	var warns []Warning
	model := first
	if model == "" && len(others) > 0 {
		model = others[0]
		if len(others) > 1 {
			warns = append(warns, Warning{File: dir, Message: fmt.Sprintf("models dir: %d model files (%s); llama-server takes one by directory order, Loadout takes %s", len(others), strings.Join(others, ", "), model)})
		}
	}
	if model == "" {
		return dirEntry{}, warns, false
	}
	e := dirEntry{id: name, file: dir, model: abs(filepath.Join(dir, model))}
	if mmproj != "" {
		e.mmproj = abs(filepath.Join(dir, mmproj))
	}
	return e, warns, true
}

// isSplitPart reports whether a name ends like a split GGUF's part,
// -NNNNN-of-NNNNN.gguf.
func isSplitPart(name string) bool {
	base := strings.TrimSuffix(name, ".gguf")
	i := strings.LastIndex(base, "-of-")
	if i < 6 || base[i-6] != '-' {
		return false
	}
	digits := base[i-5:i] + base[i+4:]
	return len(digits) == 10 && strings.Trim(digits, "0123456789") == ""
}
