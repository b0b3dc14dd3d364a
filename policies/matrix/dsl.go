package main

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The set expression language (llama-swap's matrix DSL):
//
//	expr := and { "|" and }
//	and  := atom { "&" atom }
//	atom := var | "+" set | "(" expr ")"
//
// A var or set name is a run of ASCII letters, digits, '_', '-' and '.';
// spaces, tabs and newlines separate tokens. "&" binds tighter than "|".
// Whether a name is a known var or set is checked when the matrix is
// compiled (matrix.go), not here.

// maxDepth bounds the nesting of parentheses, so that no expression can
// exhaust the parser's stack.
const maxDepth = 100

// nodeKind is the kind of an expression node.
type nodeKind uint8

const (
	nodeVar nodeKind = iota // a var: one model
	nodeRef                 // +name: the combinations of another set
	nodeAnd                 // all of kids, together
	nodeOr                  // any one of kids
)

// node is one node of a parsed expression.
type node struct {
	kind nodeKind
	name string  // nodeVar, nodeRef: the var or set name
	off  int     // nodeVar, nodeRef: byte offset of the name in the expression, for errors
	kids []*node // nodeAnd, nodeOr: two or more operands, in source order
}

// String writes the expression back fully parenthesised, for tests.
func (n *node) String() string {
	switch n.kind {
	case nodeVar:
		return n.name
	case nodeRef:
		return "+" + n.name
	}
	op := " & "
	if n.kind == nodeOr {
		op = " | "
	}
	parts := make([]string, len(n.kids))
	for i, k := range n.kids {
		parts[i] = k.String()
	}
	return "(" + strings.Join(parts, op) + ")"
}

// exprError is an error at a column of an expression (1-based, counted in
// characters).
type exprError struct {
	col int
	msg string
}

func (e *exprError) Error() string { return "column " + strconv.Itoa(e.col) + ": " + e.msg }

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokName
	tokRef
	tokAnd
	tokOr
	tokLParen
	tokRParen
)

type token struct {
	kind tokKind
	text string // tokName, tokRef: the name (without "+")
	off  int    // byte offset in the expression
}

// parser is a recursive-descent parser reading one token ahead.
type parser struct {
	src   string
	off   int   // next byte to lex
	tok   token // the current token
	depth int   // open parentheses
	err   error // the first error; parsing stops at it
}

// parse parses one set expression.
func parse(expr string) (*node, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("empty expression")
	}
	p := &parser{src: expr}
	p.next()
	n := p.or()
	if p.err == nil && p.tok.kind != tokEOF {
		if p.tok.kind == tokRParen {
			p.fail(p.tok.off, `unmatched ")"`)
		} else {
			p.fail(p.tok.off, `expected "&", "|" or end of expression, got `+p.describe(p.tok))
		}
	}
	if p.err != nil {
		return nil, p.err
	}
	return n, nil
}

// column returns the 1-based character column of byte offset off.
func (p *parser) column(off int) int { return column(p.src, off) }

// column returns the 1-based character column of byte offset off in src.
func column(src string, off int) int { return utf8.RuneCountInString(src[:off]) + 1 }

func (p *parser) fail(off int, msg string) {
	if p.err == nil {
		p.err = &exprError{col: p.column(off), msg: msg}
	}
	p.tok = token{kind: tokEOF, off: len(p.src)}
}

func (p *parser) describe(t token) string {
	switch t.kind {
	case tokEOF:
		return "end of expression"
	case tokName:
		return strconv.Quote(t.text)
	case tokRef:
		return strconv.Quote("+" + t.text)
	}
	return strconv.Quote(p.src[t.off : t.off+1])
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.'
}

// punctuation returns the kind of a one-character token, or tokEOF.
func punctuation(c byte) tokKind {
	switch c {
	case '&':
		return tokAnd
	case '|':
		return tokOr
	case '(':
		return tokLParen
	case ')':
		return tokRParen
	}
	return tokEOF
}

// next lexes the next token into p.tok.
func (p *parser) next() {
	if p.err != nil {
		return
	}
	for p.off < len(p.src) && (p.src[p.off] == ' ' || p.src[p.off] == '\t' || p.src[p.off] == '\n' || p.src[p.off] == '\r') {
		p.off++
	}
	start := p.off
	if start == len(p.src) {
		p.tok = token{kind: tokEOF, off: start}
		return
	}
	c := p.src[start]
	if k := punctuation(c); k != tokEOF {
		p.off++
		p.tok = token{kind: k, off: start}
		return
	}
	kind := tokName
	if c == '+' {
		kind = tokRef
		p.off++
	}
	nameStart := p.off
	for p.off < len(p.src) && isNameByte(p.src[p.off]) {
		p.off++
	}
	if p.off == nameStart {
		if kind == tokRef {
			p.fail(start, `expected set name after "+"`)
			return
		}
		r, _ := utf8.DecodeRuneInString(p.src[start:])
		p.fail(start, "unexpected character "+strconv.QuoteRune(r))
		return
	}
	p.tok = token{kind: kind, text: p.src[nameStart:p.off], off: start}
}

// or parses expr := and { "|" and }.
func (p *parser) or() *node {
	first := p.and()
	if p.tok.kind != tokOr {
		return first
	}
	n := &node{kind: nodeOr, kids: []*node{first}}
	for p.tok.kind == tokOr {
		p.next()
		n.kids = append(n.kids, p.and())
	}
	return n
}

// and parses and := atom { "&" atom }.
func (p *parser) and() *node {
	first := p.atom()
	if p.tok.kind != tokAnd {
		return first
	}
	n := &node{kind: nodeAnd, kids: []*node{first}}
	for p.tok.kind == tokAnd {
		p.next()
		n.kids = append(n.kids, p.atom())
	}
	return n
}

// atom parses atom := var | "+" set | "(" expr ")". After an error it
// returns a placeholder node; parse discards the tree.
func (p *parser) atom() *node {
	t := p.tok
	switch t.kind {
	case tokName, tokRef:
		p.next()
		kind := nodeVar
		if t.kind == tokRef {
			kind = nodeRef
		}
		return &node{kind: kind, name: t.text, off: t.off}
	case tokLParen:
		if p.depth == maxDepth {
			p.fail(t.off, "parentheses nested deeper than "+strconv.Itoa(maxDepth))
			return &node{}
		}
		p.depth++
		p.next()
		n := p.or()
		p.depth--
		if p.tok.kind != tokRParen {
			p.fail(p.tok.off, `expected ")" to close "(" at column `+strconv.Itoa(p.column(t.off))+", got "+p.describe(p.tok))
			return &node{}
		}
		p.next()
		return n
	}
	p.fail(t.off, "expected identifier, got "+p.describe(t))
	return &node{}
}
