package evict

import "testing"

func TestDuelVerdict(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		target                string
		xNew, yNew            bool
		decided, yFirst, keep bool
	}{
		{"x is the target, y asked before", "x", false, true, true, true, false},
		{"x is the target, y not asked", "x", false, false, true, false, false},
		{"y is the target, x not asked", "y", false, false, true, true, false},
		{"y is the target, x asked before", "y", true, false, true, false, false},
		{"both asked, order unknown", "t", true, true, false, false, false},
		{"only y asked", "t", false, true, true, true, false},
		{"only x asked", "t", true, false, true, false, false},
		{"neither asked yet", "t", false, false, false, false, true},
	} {
		decided, yFirst, keep := DuelVerdict("x", "y", tc.target, tc.xNew, tc.yNew)
		if decided != tc.decided || yFirst != tc.yFirst || keep != tc.keep {
			t.Errorf("%s: DuelVerdict = %v, %v, %v; want %v, %v, %v", tc.name, decided, yFirst, keep, tc.decided, tc.yFirst, tc.keep)
		}
	}
}
