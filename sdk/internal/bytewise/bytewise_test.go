package bytewise

import (
	"slices"
	"testing"
)

// Equal agrees with == on every length around its word and block
// sizes, with a difference at every position.
func TestEqual(t *testing.T) {
	for n := range 700 {
		a := make([]byte, n)
		for i := range a {
			a[i] = byte(i*7 + n)
		}
		b := slices.Clone(a)
		if !Equal(a, b) {
			t.Fatalf("n=%d: equal bytes compare unequal", n)
		}
		for i := range n {
			b[i]++
			if Equal(a, b) {
				t.Fatalf("n=%d: a difference at %d is not seen", n, i)
			}
			b[i]--
		}
		if n > 0 && Equal(a, b[:n-1]) {
			t.Fatalf("n=%d: different lengths compare equal", n)
		}
	}
}

// Strings compares headers: the same strings are equal, copies of them
// are not known to be.
func TestStrings(t *testing.T) {
	a := []string{"a", "bb", "ccc"}
	if !Strings(a, slices.Clone(a)) || Strings(a, a[:2]) || !Strings(nil, []string{}) {
		t.Fatal("Strings disagrees on headers")
	}
	b := slices.Clone(a)
	b[1] = string([]byte("bb"))
	if Strings(a, b) {
		t.Fatal("a copy of a string has the same header")
	}
}
