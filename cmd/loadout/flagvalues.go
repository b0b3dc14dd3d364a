package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/loadout-dev/loadout/host/policy"
)

// positiveDurationVar defines a duration flag that must be above 0 when
// given, with value as its default: a wait, a deadline or an interval of
// 0 or less is a typo, not a setting (a ticker of 0 panics, a deadline of
// 0 fails every call). The error names the flag (pflag adds it).
func positiveDurationVar(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*positiveDuration)(p), name, usage)
}

// positiveDuration is positiveDurationVar's flag value.
type positiveDuration time.Duration

func (d *positiveDuration) String() string { return time.Duration(*d).String() }
func (d *positiveDuration) Type() string   { return "duration" }
func (d *positiveDuration) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want a duration such as 500ms, 30s or 2m")
	}
	if x <= 0 {
		return fmt.Errorf("want a duration above 0, got %s", x)
	}
	*d = positiveDuration(x)
	return nil
}

// positiveIntVar defines an int flag that must be 1 or more when given,
// with value as its default (which may be 0: "not given", as --slots's).
// The error names the flag (pflag adds it).
func positiveIntVar(fs *pflag.FlagSet, p *int, name string, value int, usage string) {
	*p = value
	fs.Var((*positiveInt)(p), name, usage)
}

// positiveInt is positiveIntVar's flag value.
type positiveInt int

func (n *positiveInt) String() string { return strconv.Itoa(int(*n)) }
func (n *positiveInt) Type() string   { return "int" }
func (n *positiveInt) Set(v string) error {
	x, err := strconv.Atoi(v)
	if err != nil {
		return errors.New("want a whole number")
	}
	if x < 1 {
		return fmt.Errorf("want 1 or more, got %d", x)
	}
	*n = positiveInt(x)
	return nil
}

// memoryPagesVar defines a policy memory limit flag, in 64 KiB pages,
// with value as its default; what it takes is policy.CheckMemoryLimitPages's
// rule (1 to 65,536), so a wrong value is a flag error, not a runtime's.
func memoryPagesVar(fs *pflag.FlagSet, p *uint32, name string, value uint32, usage string) {
	*p = value
	fs.Var((*memoryPages)(p), name, usage)
}

// memoryPages is memoryPagesVar's flag value.
type memoryPages uint32

func (n *memoryPages) String() string { return strconv.FormatUint(uint64(*n), 10) }
func (n *memoryPages) Type() string   { return "pages" }
func (n *memoryPages) Set(v string) error {
	x, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return errors.New("want a whole number of 64 KiB pages")
	}
	if err := policy.CheckMemoryLimitPages(uint32(x)); err != nil {
		return err
	}
	*n = memoryPages(x)
	return nil
}
