package main

import (
	"fmt"

	"golang.org/x/mod/module"
)

// reservedModulePaths are paths the go command gives another meaning:
// "main" is the package name of commands (a module named main cannot
// import its own package, so `go test` of it fails), and "all", "std"
// and "cmd" are package patterns.
var reservedModulePaths = []string{"main", "all", "std", "cmd"}

// scaffoldModule is the module path `policy new` and `backend new` write
// into the new go.mod: flag (--module) if given, else name. Errors: a path
// the go command would refuse (x/mod's CheckImportPath) or give another
// meaning (reservedModulePaths), naming where it came from.
func scaffoldModule(name, flag string) (string, error) {
	path, from := flag, "--module"
	if path == "" {
		path, from = name, "the name "+name+", the module path without --module,"
	}
	for _, r := range reservedModulePaths {
		if path == r {
			return "", fmt.Errorf("%s: module path %q is reserved by the go command (%q cannot be a tested module's path); pick another name or pass --module, e.g. example.com/%s", from, path, r, path)
		}
	}
	if err := module.CheckImportPath(path); err != nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	return path, nil
}

// scaffoldRequire checks what the new go.mod requires of dep (the policy
// SDK or the plugins module): a version (versionFlag's value) must be one
// go.mod takes for that module (x/mod's module.Check: canonical semantic
// version, its major version matching the path), and a local directory
// (pathFlag's value) and a version are not both given (the directory's
// replace directive would leave the version unused).
func scaffoldRequire(dep, versionFlag, version, pathFlag, path string) error {
	if version != "" && path != "" {
		return fmt.Errorf("--%s and --%s: give one (the module builds against the directory, whatever the version)", pathFlag, versionFlag)
	}
	if version == "" {
		return nil
	}
	if err := module.Check(dep, version); err != nil {
		return fmt.Errorf("--%s %q: %w", versionFlag, version, err)
	}
	return nil
}
