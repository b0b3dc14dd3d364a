package sdk

import "testing"

// NearestRank is ⌈p·n⌉ for the percentiles simulate reports, checked
// against integer arithmetic for every n up to 10,000.
func TestNearestRank_IsTheCeiling(t *testing.T) {
	for _, pc := range []int{50, 95, 99} {
		for n := range 10_001 {
			want := (pc*n + 99) / 100
			if got := NearestRank(float64(pc)/100, n); got != want {
				t.Fatalf("NearestRank(%d%%, %d) = %d, want %d", pc, n, got, want)
			}
		}
	}
}

// Slack is the room left above the p95: of 100 grants, 5 may wait longer
// than the 95th; never below 0.
func TestWaitStats_Slack(t *testing.T) {
	for _, c := range []struct {
		st   WaitStats
		want int
	}{
		{WaitStats{}, 0},
		{WaitStats{Granted: 100}, 5},
		{WaitStats{Granted: 100, Above: 3}, 2},
		{WaitStats{Granted: 100, Above: 7}, 0},
		{WaitStats{Granted: 19}, 0}, // the 95th of 19 is the largest
		{WaitStats{Granted: 20}, 1},
	} {
		if got := c.st.Slack(); got != c.want {
			t.Errorf("%+v: slack %d, want %d", c.st, got, c.want)
		}
	}
}
