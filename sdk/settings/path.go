package settings

import (
	"errors"
	"strconv"
	"strings"
)

// Path syntax. A path names one setting from the root of the settings
// object: keys joined by ".", list indices in brackets, and a key that is
// not a plain name (ASCII letters, digits, '_' and '-') as a quoted string
// in brackets, Go syntax:
//
//	matrix.vars.llama-70b
//	groups.chat.members[1]
//	fifo.priority["llama-3.1-8b"]
//
// The empty path is the settings object itself; Format writes it as "$".

// Join returns the path of key inside the object at path.
func Join(path, key string) string {
	if !plainKey(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index returns the path of item i of the list at path.
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Segment is one step of a path: a key of an object, or an index of a list
// when IsIndex is set.
type Segment struct {
	Key     string
	Index   int
	IsIndex bool
}

// Split returns the steps of a path written by Join and Index; "" and "$"
// have none. It fails on text that is not a path.
func Split(path string) ([]Segment, error) {
	if path == "$" {
		return nil, nil
	}
	segs, rest, err := splitPrefix(path)
	if err != nil {
		return nil, err
	}
	if rest != "" {
		return nil, errors.New("path " + strconv.Quote(path) + ": unexpected " + strconv.Quote(rest))
	}
	return segs, nil
}

// splitPrefix reads the longest path at the start of s and returns its
// steps and what follows it.
func splitPrefix(s string) (segs []Segment, rest string, err error) {
	first := true
	for len(s) > 0 {
		switch {
		case s[0] == '[':
			end := strings.IndexByte(s, ']')
			inner := ""
			if end > 0 {
				inner = s[1:end]
			}
			if len(s) > 1 && s[1] == '"' {
				q, qerr := strconv.QuotedPrefix(s[1:])
				if qerr != nil || len(s) < 2+len(q) || s[1+len(q)] != ']' {
					return nil, s, errors.New("unterminated quoted key in " + strconv.Quote(s))
				}
				key, _ := strconv.Unquote(q)
				segs = append(segs, Segment{Key: key})
				s = s[2+len(q):]
				break
			}
			i, aerr := strconv.Atoi(inner)
			if end < 0 || aerr != nil || i < 0 {
				return nil, s, errors.New(`want [index] or ["key"] in ` + strconv.Quote(s))
			}
			segs = append(segs, Segment{Index: i, IsIndex: true})
			s = s[end+1:]
		case s[0] == '.' && !first || first && plainByte(s[0]):
			if !first {
				s = s[1:]
			}
			n := 0
			for n < len(s) && plainByte(s[n]) {
				n++
			}
			if n == 0 {
				return nil, s, errors.New("empty key in path")
			}
			segs = append(segs, Segment{Key: s[:n]})
			s = s[n:]
		default:
			return segs, s, nil
		}
		first = false
	}
	return segs, "", nil
}

func plainKey(key string) bool {
	if key == "" {
		return false
	}
	for i := range len(key) {
		if !plainByte(key[i]) {
			return false
		}
	}
	return true
}

func plainByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}
