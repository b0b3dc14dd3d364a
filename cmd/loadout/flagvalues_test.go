package main

import (
	"io"
	"strings"
	"testing"
)

// A wait, deadline, interval or count of 0 or less is refused where the
// command line is read, naming the flag: none reaches the code that uses
// it (jobs logs -f's ticker panicked on --poll-interval 0), none is taken
// as its default.
func TestFlags_PositiveValuesOnly(t *testing.T) {
	for _, args := range [][]string{
		{"jobs", "logs", "x", "-f", "--poll-interval", "0"},
		{"ps", "--timeout", "-1s"},
		{"load", "small", "--wait", "0"},
		{"unload", "--wait", "-2m"},
		{"policy", "check", "x.wasm", "--timeout", "0"},
		{"policy", "bench", "x.wasm", "--events", "-5"},
		{"policy", "bench", "x.wasm", "--models", "0"},
		{"backend", "check", "x", "--timeout", "0s"},
		{"simulate", "-t", "x.csv", "--slots", "0"},
		{"policy", "tune", "-t", "x.csv", "--set", "router.x=1", "--slots", "-1"},
		{"ps", "--timeout", "soon"},
		{"serve", "--listen", "127.0.0.1:0", "--max-running-jobs", "0"},
		{"policy", "check", "x.wasm", "--memory-pages", "70000"}, // wazero panicked
		{"policy", "tune", "-t", "x.csv", "--set", "router.x=1", "--memory-pages", "0"},
	} {
		root := newRootCmd()
		root.SetArgs(args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		flag := args[len(args)-2]
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `"`+flag+`"`) {
			t.Errorf("loadout %s: %v; want an error naming %s", strings.Join(args, " "), err, flag)
		}
	}
}
