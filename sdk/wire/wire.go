// Package wire is the host's half of the loadout policy ABI: it encodes
// the events a host hands a policy module and decodes what the module
// writes back, and it names the message kinds and export statuses. A policy
// author never imports it — a policy sees only package sdk's types and
// interfaces, and the SDK's guest glue speaks the wire for it.
//
// The encoding (docs/ABI.md): every message is
//
//	version u8 | kind u8 | fields…
//
// with fields little-endian and fixed width; a string or byte slice is a
// u32 length then bytes; a list is a u32 count then items. There are no
// optional fields: a new field means a new ABI version, and the codec
// speaks every version from MinVersion to sdk.ABIVersion. A host talks to
// each module in the module's own version (its loadout_abi_version):
// AppendVersion and DecodeVersion take it; Append and Decode are the
// current version, sdk.ABIVersion, which is all a guest speaks. A message
// of another version than the decoder's is refused by its header, never
// read with the wrong field list. The golden files in testdata/golden pin
// the encoding byte for byte: version 2's (frozen) at the top, version 3's
// in testdata/golden/v3.
//
// The codec itself is package sdk's (the message types are sdk's, and the
// guest needs it without this package's callers); sdk registers it here
// when it is initialised, so a host that imports sdk's types has it.
package wire

import (
	"errors"
	"reflect"
	"strconv"
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
	// MsgWaits (sdk.WaitStats) is the reply of the optional `waits`
	// import (issue 26), added within version 3 as `demand` was within
	// 2: a module that does not import it never receives one, and a
	// version 2 module never does (the import refuses it).
	MsgWaits Kind = 21
)

// MinVersion is the oldest ABI version the codec speaks, and so the oldest
// a host loads: version 2 (version 1's modules are refused; docs/ABI.md,
// "Versions"). The newest is sdk.ABIVersion.
const MinVersion = 2

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
var ErrMalformed = errors.New("malformed loadout policy ABI message")

// Malformed returns a decoding error that says what is wrong: its text is
// ErrMalformed's, ": " and detail, and it wraps ErrMalformed. It is what
// fmt.Errorf("%w: "+detail, ErrMalformed) makes, without package fmt,
// which a policy guest does not link (the guest decodes with this codec).
func Malformed(detail string) error { return &malformed{detail: detail} }

type malformed struct{ detail string }

func (e *malformed) Error() string { return ErrMalformed.Error() + ": " + e.detail }
func (e *malformed) Unwrap() error { return ErrMalformed }

var (
	current  uint8 // sdk.ABIVersion
	appendFn func(dst []byte, v uint8, m any) ([]byte, bool)
	decodeFn func(src []byte, v uint8, m any) (bool, error)
)

// Register installs the codec, which speaks versions MinVersion to
// newest. Package sdk calls it from its init; it is not for anyone else,
// and a second call panics.
func Register(newest uint8, appendMsg func(dst []byte, v uint8, m any) ([]byte, bool), decodeMsg func(src []byte, v uint8, m any) (bool, error)) {
	if appendFn != nil {
		panic("wire: codec registered twice")
	}
	current, appendFn, decodeFn = newest, appendMsg, decodeMsg
}

// Supported reports whether the codec speaks ABI version v: MinVersion to
// sdk.ABIVersion.
func Supported(v uint32) bool { return v >= MinVersion && v <= uint32(current) }

// Append appends m's encoding at the current version, sdk.ABIVersion
// (header and fields), to dst and returns the extended slice. m must be a
// pointer to one of sdk's message types (see the kinds above); anything
// else is a programming error and panics.
func Append(dst []byte, m any) []byte { return AppendVersion(dst, current, m) }

// AppendVersion is Append at ABI version v: the fields version v has, and v
// in the header. A field a later version added is left out, whatever its
// value (a version 2 sdk.ModelInfo has no residency); v must be Supported,
// else it panics, as does a message that is not sdk's.
func AppendVersion(dst []byte, v uint8, m any) []byte {
	if !Supported(uint32(v)) {
		panic("wire: ABI version " + strconv.Itoa(int(v)) + " is not one this codec speaks")
	}
	b, ok := appendFn(dst, v, m)
	if !ok {
		panic("wire: " + typeName(m) + " is not an sdk message")
	}
	return b
}

// Decode decodes src, which must hold exactly one message of m's kind at
// the current version, into m, a pointer to one of sdk's message types
// (anything else panics). Errors wrap ErrMalformed and say what is wrong
// and where.
func Decode(src []byte, m any) error { return DecodeVersion(src, current, m) }

// DecodeVersion is Decode at ABI version v: src's header must say v (a
// message of any other version is an error that names both, before a field
// is read), and a field a later version added is left zero. v must be
// Supported, else it panics.
func DecodeVersion(src []byte, v uint8, m any) error {
	if !Supported(uint32(v)) {
		panic("wire: ABI version " + strconv.Itoa(int(v)) + " is not one this codec speaks")
	}
	ok, err := decodeFn(src, v, m)
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
