package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// A configuration may be split over files: serve's --config and the
// *.yml and *.yaml files of --config-dir (llama-swap's -config and
// -config-dir), merged in that order into one document before it is
// decoded, so every rule of one file holds for the whole. The merge is
// llama-swap's:
//
//   - a key in one file only is kept as it is;
//   - mappings merge key by key, lists are concatenated (apiKeys, a
//     preload list), and a setting given twice must have the same value
//     (null gives way to a value);
//   - the entries of the maps below name one thing each (a model, a
//     group, a peer): one defined in two files is an error naming both.
//
// Every node keeps the file it was read from, so errors name file:line.

// identityMaps are the key paths whose entries each name one thing.
var identityMaps = []string{
	"models", "groups", "profiles", "selectors", "peers", "matrix",
	"routing.router.settings.groups", "routing.router.settings.matrix",
}

// DirFiles lists the configuration files of a --config-dir: the *.yml
// and *.yaml files directly in dir (not its subdirectories), by name, as
// llama-swap's -config-dir reads them; a symbolic link is read as the
// file it points to. A directory with none gives none and no error; one
// that cannot be read is an error, and so is a YAML name that is not a
// regular file (a named pipe would hang every reading of the directory).
func DirFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("config dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if ext != ".yml" && ext != ".yaml" {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			return nil, fmt.Errorf("config dir: %w", err)
		case fi.IsDir():
			continue
		case !fi.Mode().IsRegular():
			return nil, fmt.Errorf("config dir: %s is not a regular file (%s)", p, fi.Mode().Type())
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// LoadFiles reads the configuration split over paths, merged in that
// order (see above), fitted to the host by o (ParseWith). The first file
// names the configuration (Config.File) and resolves its relative paths;
// Config.Files lists them all. An unreadable file, or one path given
// twice, is an error; a file that is empty or only comments adds nothing.
func LoadFiles(paths []string, o Options) (*Config, []Warning, error) {
	if len(paths) == 0 {
		return nil, nil, fmt.Errorf("config: no configuration file given")
	}
	srcs := make([]source, 0, len(paths))
	seen := map[string]string{}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, nil, fmt.Errorf("config: %w", err)
		}
		if first, dup := seen[abs]; dup {
			return nil, nil, fmt.Errorf("config: %s is given twice (as %s and %s): remove it from --config or from --config-dir", abs, first, p)
		}
		seen[abs] = p
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return nil, nil, fmt.Errorf("config: %s is a directory: give a directory of YAML files as --config-dir", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, fmt.Errorf("config: %w", err)
		}
		srcs = append(srcs, source{name: p, data: data})
	}
	return parseSources(srcs, o)
}

// source is one configuration file: its name in messages and its text.
type source struct {
	name string
	data []byte
}

// document decodes one source as decodeOne, reporting its problems at
// its own name, and records the file of every node from a source other
// than the first (origin).
func (d *decoder) document(src source, first bool) (*yaml.Node, bool) {
	main := d.file
	d.file = src.name
	defer func() { d.file = main }()
	root, ok := d.decodeOne(src.data)
	if root == nil || first {
		return root, ok
	}
	var mark func(n *yaml.Node)
	mark = func(n *yaml.Node) {
		d.origin[n] = src.name
		for _, c := range n.Content {
			mark(c)
		}
	}
	mark(root)
	return root, ok
}

// mergeMapping merges the mapping src into dst in place (both from
// normalize), path being their key path.
func (d *decoder) mergeMapping(dst, src *yaml.Node, path string) {
	identity := slices.Contains(identityMaps, path)
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		dk := keyNode(dst, k.Value)
		if dk == nil {
			dst.Content = append(dst.Content, k, v)
			continue
		}
		kp := join(path, k.Value)
		if identity {
			d.errorf(k, kp, "already defined at %s: each entry of %s is defined in one file", d.posOf(dk), path)
			continue
		}
		d.mergeValue(child(dst, k.Value), v, kp)
	}
}

// mergeValue merges the value src into dst in place, path being their key
// path: mappings merge, lists concatenate, and scalars must agree (null
// gives way).
func (d *decoder) mergeValue(dst, src *yaml.Node, path string) {
	switch {
	case isNull(src):
	case isNull(dst):
		*dst = *src
		d.origin[dst] = d.fileOf(src)
	case dst.Kind == yaml.MappingNode && src.Kind == yaml.MappingNode:
		d.mergeMapping(dst, src, path)
	case dst.Kind == yaml.SequenceNode && src.Kind == yaml.SequenceNode:
		dst.Content = append(dst.Content, src.Content...)
	case dst.Kind == yaml.ScalarNode && src.Kind == yaml.ScalarNode:
		if dst.Value != src.Value || dst.ShortTag() != src.ShortTag() {
			d.errorf(src, path, "%q here, %q at %s: a setting in more than one file must have one value", src.Value, dst.Value, d.posOf(dst))
		}
	default:
		d.errorf(src, path, "a %s here, a %s at %s: a setting in more than one file must be of one kind", kindName(src), kindName(dst), d.posOf(dst))
	}
}

// fileOf is the file node n was read from.
func (d *decoder) fileOf(n *yaml.Node) string {
	if f, ok := d.origin[n]; ok {
		return f
	}
	return d.file
}

// posOf is where node n is, for a message that points at a second place:
// "line N" in a configuration of one file, FILE:N in one of several.
func (d *decoder) posOf(n *yaml.Node) string {
	return d.place(d.pos(n))
}

// place is p for a message that points at a second place, as posOf.
func (d *decoder) place(p Pos) string {
	if len(d.files) <= 1 {
		return fmt.Sprintf("line %d", p.Line)
	}
	return Pos{File: p.File, Line: p.Line}.String()
}

// fileRank orders positions by file: the files in merge order, then any
// other name (a router-mode input's).
func (d *decoder) fileRank(file string) int {
	if i := slices.Index(d.files, file); i >= 0 {
		return i
	}
	return len(d.files)
}

// describeFiles is how a report names a configuration read from files:
// the first and, when there are more, how many.
func describeFiles(files []string) string {
	switch len(files) {
	case 0, 1:
		return ""
	case 2:
		return " + " + files[1]
	default:
		return fmt.Sprintf(" + %d files (%s)", len(files)-1, strings.Join(files[1:], ", "))
	}
}
