package settings

import (
	"bytes"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Kind is the JSON kind of a Value.
type Kind uint8

// The kinds. Null is also the kind of a setting that is absent.
const (
	Null Kind = iota
	Bool
	Number
	String
	List
	Object
)

var kindNames = [...]string{"null", "a boolean", "a number", "a string", "a list", "an object"}

// String returns "null", "a boolean", "a number", "a string", "a list" or
// "an object", for messages.
func (k Kind) String() string { return kindNames[k] }

// Value is one decoded setting and its path. The zero Value is the absent
// root: Null, path "".
type Value struct {
	path string
	n    *node
}

type node struct {
	kind  Kind
	b     bool
	num   string // a number's JSON text, as written
	s     string
	keys  []string // Object: in document order
	items []*node  // Object: the values of keys; List: the items
}

// Decode decodes raw, the settings a factory received, into the root
// Value. Empty or all-space raw is Null, as "null" is: no settings. A key
// written twice in one object is an error; so is anything after the value.
//
// The JSON is read by jsontext (github.com/go-json-experiment/json, the
// module that mirrors Go's encoding/json/v2), a tokenizer that uses no
// reflection, so a guest that reads its settings does not link
// encoding/json (about 0.7 MB of Wasm with the reflection it brings).
func Decode(raw []byte) (Value, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return Value{}, nil
	}
	// Duplicate keys get this package's error, with their path; invalid
	// UTF-8 is read as encoding/json reads it (replaced, not refused).
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	n, err := decodeNode(dec, "")
	if err == nil {
		if _, terr := dec.ReadToken(); terr != io.EOF {
			err = NewError("", "invalid JSON: data after the settings object")
		}
	}
	if err != nil {
		var se *Error
		if errors.As(err, &se) {
			return Value{}, se
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return Value{}, NewError("", "invalid JSON: unexpected end of JSON input")
		}
		return Value{}, NewError("", "invalid JSON: "+strings.TrimPrefix(err.Error(), "jsontext: "))
	}
	return Value{n: n}, nil
}

func decodeNode(dec *jsontext.Decoder, path string) (*node, error) {
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case 'n':
		return &node{kind: Null}, nil
	case 't', 'f':
		return &node{kind: Bool, b: tok.Bool()}, nil
	case '0':
		return &node{kind: Number, num: tok.String()}, nil
	case '"':
		return &node{kind: String, s: tok.String()}, nil
	case '[':
		n := &node{kind: List}
		for dec.PeekKind() != ']' {
			item, err := decodeNode(dec, Index(path, len(n.items)))
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, item)
		}
		_, err := dec.ReadToken()
		return n, err
	}
	// '{': the tokenizer hands out nothing else here.
	n := &node{kind: Object}
	for dec.PeekKind() != '}' {
		kt, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		key := kt.String()
		kp := Join(path, key)
		if slices.Contains(n.keys, key) {
			return nil, NewError(kp, strconv.Quote(key)+" is set twice")
		}
		val, err := decodeNode(dec, kp)
		if err != nil {
			return nil, err
		}
		n.keys = append(n.keys, key)
		n.items = append(n.items, val)
	}
	_, err = dec.ReadToken()
	return n, err
}

// Path is where the value is (see Join).
func (v Value) Path() string { return v.path }

// Kind is the value's JSON kind; Null when the setting is absent.
func (v Value) Kind() Kind {
	if v.n == nil {
		return Null
	}
	return v.n.kind
}

// IsNull reports whether the setting is absent or null.
func (v Value) IsNull() bool { return v.Kind() == Null }

// want is the error for a value of the wrong kind.
func (v Value) want(what string) *Error {
	return NewError(v.path, "want "+what+", got "+v.excerpt())
}

// excerpt is the value as JSON, shortened, for messages: compact, an
// object's keys sorted, <, > and & escaped, as encoding/json's Marshal
// writes it.
func (v Value) excerpt() string {
	b := appendJSON(nil, v.n)
	const most = 60
	if s := string(b); len(s) > most {
		return s[:most] + "…"
	}
	return string(b)
}

// appendJSON appends n as compact JSON (see excerpt); nil is null.
func appendJSON(b []byte, n *node) []byte {
	if n == nil {
		return append(b, "null"...)
	}
	switch n.kind {
	case Bool:
		return strconv.AppendBool(b, n.b)
	case Number:
		return append(b, n.num...)
	case String:
		return appendString(b, n.s)
	case List:
		b = append(b, '[')
		for i, it := range n.items {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, it)
		}
		return append(b, ']')
	case Object:
		order := make([]int, len(n.keys))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(x, y int) int { return strings.Compare(n.keys[x], n.keys[y]) })
		b = append(b, '{')
		for i, k := range order {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, n.keys[k])
			b = append(b, ':')
			b = appendJSON(b, n.items[k])
		}
		return append(b, '}')
	}
	return append(b, "null"...)
}

// appendString appends s quoted as JSON, with encoding/json's escapes of
// <, >, & and the JavaScript line separators.
func appendString(b []byte, s string) []byte {
	q, _ := jsontext.AppendQuote(nil, s) // invalid UTF-8 becomes U+FFFD, never an error here
	for _, c := range string(q) {
		switch c {
		case '<':
			b = append(b, `\u003c`...)
		case '>':
			b = append(b, `\u003e`...)
		case '&':
			b = append(b, `\u0026`...)
		case '\u2028':
			b = append(b, `\u2028`...)
		case '\u2029':
			b = append(b, `\u2029`...)
		default:
			b = utf8.AppendRune(b, c)
		}
	}
	return b
}

// Fields is a decoded object: its keys in document order and their values.
type Fields struct {
	path string
	n    *node
}

// Object reads the value as an object whose keys must all be in known;
// with no known keys, any key is allowed (a map, such as model → priority).
// A null or absent value is an empty object. A key not in known is an
// error at that key's path that lists the known ones.
func (v Value) Object(known ...string) (Fields, error) {
	switch v.Kind() {
	case Null:
		return Fields{path: v.path}, nil
	case Object:
	default:
		return Fields{}, v.want("an object")
	}
	if len(known) > 0 {
		for _, k := range v.n.keys {
			if !slices.Contains(known, k) {
				return Fields{}, NewError(Join(v.path, k), "unknown setting "+strconv.Quote(k)+" (known: "+strings.Join(known, ", ")+")")
			}
		}
	}
	return Fields(v), nil
}

// Path is where the object is.
func (f Fields) Path() string { return f.path }

// Keys returns the keys in the order written.
func (f Fields) Keys() []string {
	if f.n == nil {
		return nil
	}
	return slices.Clone(f.n.keys)
}

// Get returns the value of key; absent, a Null Value at key's path.
func (f Fields) Get(key string) Value {
	if f.n != nil {
		if i := slices.Index(f.n.keys, key); i >= 0 {
			return Value{path: Join(f.path, key), n: f.n.items[i]}
		}
	}
	return Value{path: Join(f.path, key)}
}

// Has reports whether key is set (to anything, null included).
func (f Fields) Has(key string) bool { return f.n != nil && slices.Contains(f.n.keys, key) }

// List reads the value as a list. A null or absent value is an empty list.
func (v Value) List() ([]Value, error) {
	switch v.Kind() {
	case Null:
		return nil, nil
	case List:
	default:
		return nil, v.want("a list")
	}
	out := make([]Value, len(v.n.items))
	for i, it := range v.n.items {
		out[i] = Value{path: Index(v.path, i), n: it}
	}
	return out, nil
}

// String reads the value as a string.
func (v Value) String() (string, error) {
	if v.Kind() != String {
		return "", v.want("a string")
	}
	return v.n.s, nil
}

// OneOf reads the value as one of a fixed set of strings, names, and
// returns its index in names: a setting like fifo's load_order
// ("arrival" or "queued_wait"). Anything else, a string not in names or
// a value of another kind, is an *Error naming the setting's path and
// every name: `want arrival or queued_wait, got "fifo"`.
func (v Value) OneOf(names ...string) (int, error) {
	if v.Kind() == String {
		if i := slices.Index(names, v.n.s); i >= 0 {
			return i, nil
		}
	}
	return -1, v.want(Or(names))
}

// Or lists names as the alternatives of a message: "a", "a or b", "a, b
// or c"; "nothing" for none. OneOf's errors use it, and so does the
// host's request schema check ("want string or null").
func Or(names []string) string {
	switch len(names) {
	case 0:
		return "nothing"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Bool reads the value as true or false.
func (v Value) Bool() (bool, error) {
	if v.Kind() != Bool {
		return false, v.want("true or false")
	}
	return v.n.b, nil
}

// Int reads the value as a whole number from lo to hi.
func (v Value) Int(lo, hi int64) (int64, error) {
	rng := "a whole number from " + strconv.FormatInt(lo, 10) + " to " + strconv.FormatInt(hi, 10)
	if v.Kind() != Number {
		return 0, v.want(rng)
	}
	n, err := strconv.ParseInt(v.n.num, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(v.n.num, 64)
		if ferr != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return 0, v.want(rng)
		}
		n = int64(f)
	}
	if n < lo || n > hi {
		return 0, v.want(rng)
	}
	return n, nil
}

// Float reads the value as a number.
func (v Value) Float() (float64, error) {
	if v.Kind() != Number {
		return 0, v.want("a number")
	}
	f, err := strconv.ParseFloat(v.n.num, 64)
	if err != nil {
		return 0, v.want("a number")
	}
	return f, nil
}

// Duration reads the value as a Duration (see ParseDuration).
func (v Value) Duration() (Duration, error) {
	var d Duration
	var err error
	switch v.Kind() {
	case String:
		d, err = ParseDuration(v.n.s)
	case Number:
		d, err = secondsDuration(v.n.num)
	default:
		return 0, v.want(`a duration like "30s" or a number of seconds`)
	}
	if err != nil {
		return 0, NewError(v.path, err.Error())
	}
	return d, nil
}

// Size reads the value as a Size (see ParseSize).
func (v Value) Size() (Size, error) {
	var s Size
	var err error
	switch v.Kind() {
	case String:
		var n int64
		n, err = ParseSize(v.n.s)
		s = Size(n)
	case Number:
		var n int64
		n, err = strconv.ParseInt(v.n.num, 10, 64)
		if err != nil || n < 0 {
			return 0, v.want(`a size like "512MiB" or a whole number of bytes`)
		}
		s = Size(n)
	default:
		return 0, v.want(`a size like "512MiB" or a whole number of bytes`)
	}
	if err != nil {
		return 0, NewError(v.path, err.Error())
	}
	return s, nil
}
