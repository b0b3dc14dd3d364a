// Package wire is the host's half of the loadout_v2 policy ABI: it encodes
// the events a host hands a policy module and decodes what the module
// writes back, and it names the message kinds and export statuses. A policy
// author never imports it — a policy sees only package sdk's types and
// interfaces, and the SDK's guest glue speaks the wire for it.
//
// The encoding (docs/ABI.md): every message is
//
//	version u8 (= sdk.ABIVersion) | kind u8 | fields…
//
// with fields little-endian and fixed width; a string or byte slice is a
// u32 length then bytes; a list is a u32 count then items. There are no
// optional fields: a new field means a new ABI version. The golden files in
// testdata/golden pin the encoding byte for byte.
//
// The codec itself is package sdk's (the message types are sdk's, and the
// guest needs it without this package's callers); sdk registers it here
// when it is initialised, so a host that imports sdk's types has it.
package wire

import (
	"errors"
	"reflect"
)

// Kind identifies a message type on the wire (the second header byte).
type Kind uint8

// Message kinds, one per sdk message type.
const (
	MsgInit        Kind = 1  // sdk.InitEvent
	MsgRequest     Kind = 2  // sdk.RequestEvent
	MsgSwapDone    Kind = 3  // sdk.SwapDoneEvent
	MsgServeDone   Kind = 4  // sdk.ServeDoneEvent
	MsgCancel      Kind = 5  // sdk.CancelEvent
	MsgUnload      Kind = 6  // sdk.UnloadEvent
	MsgTick        Kind = 7  // sdk.TickEvent
	MsgShutdown    Kind = 8  // sdk.ShutdownEvent
	MsgPlanRequest Kind = 9  // sdk.PlanRequest
	MsgPlan        Kind = 10 // sdk.Plan
	MsgSwapStart   Kind = 11 // sdk.SwapStartEvent
	MsgSwapRequest Kind = 12 // sdk.SwapRequest
	MsgModelInfo   Kind = 13 // sdk.ModelInfo
	MsgModelList   Kind = 14 // sdk.ModelList
	MsgSnapshot    Kind = 15 // sdk.Snapshot
	MsgStopRequest Kind = 16 // sdk.StopRequest
	// MsgJobPlanRequest (sdk.JobPlanRequest) goes to the `plan` export
	// like MsgPlanRequest. It came after version 2's first release: a
	// module built before it fails to decode it (StatusBadInput), which
	// the host reads as "does not plan for jobs".
	MsgJobPlanRequest Kind = 17
	// MsgReplicaSet (sdk.ReplicaSet) is the reply of the optional
	// `replicas` import (issue 15), added in version 2 like `admit`.
	MsgReplicaSet Kind = 18
	// MsgSnapshotDelta (sdk.SnapshotDelta) is the reply of the optional
	// snapshot_delta import, which also came after version 2's first
	// release: a module that does not import it never receives one.
	MsgSnapshotDelta Kind = 19
	// MsgDemand (sdk.DemandList) is the reply of the optional `demand`
	// import (issue 11), added in version 2 like `replicas`.
	MsgDemand Kind = 20
)

// HeaderSize is the size of a message's header (version, kind) in bytes.
const HeaderSize = 2

// Export statuses: the high 32 bits of an event export's i64 result (the
// low 32 bits are the length of its output).
const (
	StatusOK       = 0 // handled
	StatusError    = 1 // the policy returned an error; its text was passed to set_error
	StatusPanic    = 2 // the policy panicked; the panic text was passed to set_error
	StatusBadInput = 3 // the event could not be decoded
	StatusNoPolicy = 4 // no policy of the kind this export needs is registered; for a MsgJobPlanRequest, the swapper does not plan for jobs
)

// ErrMalformed is wrapped by every decoding error: a truncated message, a
// wrong version or kind, a length past the end, or trailing bytes.
var ErrMalformed = errors.New("malformed loadout_v2 message")

// Malformed returns a decoding error that says what is wrong: its text is
// ErrMalformed's, ": " and detail, and it wraps ErrMalformed. It is what
// fmt.Errorf("%w: "+detail, ErrMalformed) makes, without package fmt,
// which a policy guest does not link (the guest decodes with this codec).
func Malformed(detail string) error { return &malformed{detail: detail} }

type malformed struct{ detail string }

func (e *malformed) Error() string { return ErrMalformed.Error() + ": " + e.detail }
func (e *malformed) Unwrap() error { return ErrMalformed }

var (
	appendFn func(dst []byte, m any) ([]byte, bool)
	decodeFn func(src []byte, m any) (bool, error)
)

// Register installs the codec. Package sdk calls it from its init; it is
// not for anyone else, and a second call panics.
func Register(appendMsg func(dst []byte, m any) ([]byte, bool), decodeMsg func(src []byte, m any) (bool, error)) {
	if appendFn != nil {
		panic("wire: codec registered twice")
	}
	appendFn, decodeFn = appendMsg, decodeMsg
}

// Append appends m's encoding (header and fields) to dst and returns the
// extended slice. m must be a pointer to one of sdk's message types (see
// the kinds above); anything else is a programming error and panics.
func Append(dst []byte, m any) []byte {
	b, ok := appendFn(dst, m)
	if !ok {
		panic("wire: " + typeName(m) + " is not an sdk message")
	}
	return b
}

// Decode decodes src, which must hold exactly one message of m's kind, into
// m, a pointer to one of sdk's message types (anything else panics).
// Errors wrap ErrMalformed and say what is wrong and where.
func Decode(src []byte, m any) error {
	ok, err := decodeFn(src, m)
	if !ok {
		panic("wire: " + typeName(m) + " is not an sdk message")
	}
	return err
}

// typeName is m's type as fmt's %T writes it.
func typeName(m any) string {
	if m == nil {
		return "<nil>"
	}
	return reflect.TypeOf(m).String()
}
