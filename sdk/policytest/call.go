package policytest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
)

// Op names an effect a policy asked the Host for.
type Op string

// The effects a Host records. Reads (ModelState, RunningModels, Snapshot,
// Plan) change nothing and are not recorded.
const (
	OpLog              Op = "Log"
	OpGrantServe       Op = "GrantServe"
	OpGrantError       Op = "GrantError"
	OpStartSwap        Op = "StartSwap"
	OpStopProcesses    Op = "StopProcesses"
	OpSetQueuePosition Op = "SetQueuePosition"
	OpAdmit            Op = "Admit" // sdk.Admitter, with Host.WarmPath
	// OpWarmGrant is the Host's own grant on the warm path (Host.WarmPath),
	// not a call of the policy: recorded so a test sees where the
	// policy's admission took effect.
	OpWarmGrant Op = "WarmGrant"
)

// Call is one effect the policy asked for, with its arguments and the
// Host's answer. Only the fields of its Op are set.
type Call struct {
	Op      Op
	ID      sdk.RequestID   // GrantServe, GrantError, SetQueuePosition, WarmGrant
	Model   string          // GrantServe, StartSwap (the target), Admit, WarmGrant
	Models  []string        // StartSwap (evicted), StopProcesses
	Devices []int32         // StartSwap
	Modes   []sdk.EvictMode // StartSwap: as the policy passed them (ABI version 3)
	Code    sdk.ErrorCode   // GrantError
	Msg     string          // GrantError, Log
	Level   sdk.LogLevel    // Log
	Pos     int             // SetQueuePosition
	OK      bool            // GrantServe: the caller took the grant
	Err     error           // StartSwap, StopProcesses, Admit: nil or the refusal
	Limit   uint32          // Admit
	Flags   sdk.AdmitFlags  // Admit
}

// String renders the call like Go code, e.g. `GrantServe(3, "a") = true` or
// `StartSwap("b", evict ["a"]) = model already has a swap in progress`.
func (c Call) String() string {
	switch c.Op {
	case OpLog:
		return fmt.Sprintf("Log(%s, %q)", levelName(c.Level), c.Msg)
	case OpGrantServe:
		return fmt.Sprintf("GrantServe(%d, %q) = %t", c.ID, c.Model, c.OK)
	case OpGrantError:
		return fmt.Sprintf("GrantError(%d, %s, %q)", c.ID, CodeName(c.Code), c.Msg)
	case OpStartSwap:
		s := fmt.Sprintf("StartSwap(%q, evict %s", c.Model, quoteList(c.Models))
		if c.Devices != nil {
			s += fmt.Sprintf(", devices %v", c.Devices)
		}
		if c.Modes != nil {
			s += ", modes " + modesString(c.Modes)
		}
		return s + ") = " + errString(c.Err)
	case OpStopProcesses:
		return fmt.Sprintf("StopProcesses(%s) = %s", quoteList(c.Models), errString(c.Err))
	case OpSetQueuePosition:
		return fmt.Sprintf("SetQueuePosition(%d, %d)", c.ID, c.Pos)
	case OpAdmit:
		return fmt.Sprintf("Admit(%q, %d, %d) = %s", c.Model, c.Limit, c.Flags, errString(c.Err))
	case OpWarmGrant:
		return fmt.Sprintf("WarmGrant(%d, %q)", c.ID, c.Model)
	}
	return fmt.Sprintf("%s(?)", c.Op)
}

// Calls is a Host's record, printed one call a line.
type Calls []Call

// String prints one call a line.
func (cs Calls) String() string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Of returns the calls of one Op, in order.
func (cs Calls) Of(op Op) Calls {
	var out Calls
	for _, c := range cs {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

var codeNames = map[sdk.ErrorCode]string{
	sdk.CodeInternal:         "CodeInternal",
	sdk.CodeModelNotFound:    "CodeModelNotFound",
	sdk.CodeQueueFull:        "CodeQueueFull",
	sdk.CodeConcurrencyLimit: "CodeConcurrencyLimit",
	sdk.CodeUnavailable:      "CodeUnavailable",
	sdk.CodeSwapFailed:       "CodeSwapFailed",
	sdk.CodeTimeout:          "CodeTimeout",
	sdk.CodeTooLarge:         "CodeTooLarge",
}

// CodeName returns the sdk constant's name of an error code, e.g.
// "CodeQueueFull", for test messages.
func CodeName(c sdk.ErrorCode) string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return "ErrorCode(" + strconv.Itoa(int(c)) + ")"
}

func levelName(l sdk.LogLevel) string {
	switch l {
	case sdk.LevelDebug:
		return "debug"
	case sdk.LevelInfo:
		return "info"
	case sdk.LevelWarn:
		return "warn"
	case sdk.LevelError:
		return "error"
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, " ") + "]"
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
