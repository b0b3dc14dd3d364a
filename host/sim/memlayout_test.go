package sim

import (
	"reflect"
	"testing"
)

func TestLayoutMemory_Placement(t *testing.T) {
	dev := func(bytes uint64) []Device { return []Device{{Index: 0, Bytes: bytes}} }
	on0 := []int{0}
	tests := []struct {
		name string
		tl   Timeline
		want []block // of panel 0
	}{
		{
			name: "a model keeps its offset from state to state",
			tl: Timeline{Devices: dev(24 * gib), Residency: []Residency{
				{Model: "a", State: "starting", Devices: on0, Bytes: 10 * gib, From: 0, To: 5},
				{Model: "b", State: "starting", Devices: on0, Bytes: 10 * gib, From: 1, To: 6},
				{Model: "a", State: "ready", Devices: on0, Bytes: 10 * gib, From: 5, To: 50},
				{Model: "b", State: "ready", Devices: on0, Bytes: 10 * gib, From: 6, To: 50},
			}},
			want: []block{
				{model: "a", state: "starting", from: 0, to: 5, lo: 0, hi: 10 * gib},
				{model: "b", state: "starting", from: 1, to: 6, lo: 10 * gib, hi: 20 * gib},
				{model: "a", state: "ready", from: 5, to: 50, lo: 0, hi: 10 * gib},
				{model: "b", state: "ready", from: 6, to: 50, lo: 10 * gib, hi: 20 * gib},
			},
		},
		{
			name: "a model loaded later takes the lowest space freed",
			tl: Timeline{Devices: dev(24 * gib), Residency: []Residency{
				{Model: "a", State: "ready", Devices: on0, Bytes: 8 * gib, From: 0, To: 10},
				{Model: "b", State: "ready", Devices: on0, Bytes: 8 * gib, From: 0, To: 30},
				{Model: "c", State: "ready", Devices: on0, Bytes: 4 * gib, From: 10, To: 30},
				{Model: "d", State: "ready", Devices: on0, Bytes: 8 * gib, From: 20, To: 30},
			}},
			want: []block{
				{model: "a", state: "ready", from: 0, to: 10, lo: 0, hi: 8 * gib},
				{model: "b", state: "ready", from: 0, to: 30, lo: 8 * gib, hi: 16 * gib},
				{model: "c", state: "ready", from: 10, to: 30, lo: 0, hi: 4 * gib},
				{model: "d", state: "ready", from: 20, to: 30, lo: 16 * gib, hi: 24 * gib}, // 4 GiB free below b: too small
			},
		},
		{
			name: "no duration, no block; unknown size, 1% of the device",
			tl: Timeline{Devices: dev(100 * gib), Residency: []Residency{
				{Model: "a", State: "stopping", Devices: on0, Bytes: 8 * gib, From: 10, To: 10},
				{Model: "b", State: "ready", Devices: on0, From: 0, To: 10},
			}},
			want: []block{{model: "b", state: "ready", from: 0, to: 10, lo: 0, hi: gib}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			panels := layoutMemory(tt.tl)
			if len(panels) != 1 {
				t.Fatalf("%d panels, want 1", len(panels))
			}
			if !reflect.DeepEqual(panels[0].blocks, tt.want) {
				t.Errorf("blocks\n%+v\nwant\n%+v", panels[0].blocks, tt.want)
			}
		})
	}
}

// A model split over two GPUs holds half its bytes on each; a device a
// residency names that the timeline's devices lack still gets a panel;
// models on no device get a lane each, by name, the first at the top.
func TestLayoutMemory_Panels(t *testing.T) {
	tl := Timeline{
		Devices: []Device{{Index: 1, Bytes: 24 * gib}, {Index: 0, Bytes: 24 * gib}},
		Residency: []Residency{
			{Model: "big", State: "ready", Devices: []int{0, 1}, Bytes: 40 * gib, From: 0, To: 10},
			{Model: "odd", State: "ready", Devices: []int{3}, Bytes: 2 * gib, From: 0, To: 10},
			{Model: "zed", State: "ready", From: 0, To: 10},
			{Model: "abe", State: "ready", From: 5, To: 10},
		},
	}
	panels := layoutMemory(tl)
	var devs []int
	for _, p := range panels {
		devs = append(devs, p.dev)
	}
	if want := []int{1, 0, 3, -1}; !reflect.DeepEqual(devs, want) {
		t.Fatalf("panels of devices %v, want %v", devs, want)
	}
	for _, p := range panels[:2] {
		if b := p.blocks[0]; b.lo != 0 || b.hi != 20*gib {
			t.Errorf("device %d: big at [%g, %g), want half of 40 GiB", p.dev, b.lo, b.hi)
		}
	}
	lanes := panels[3]
	if want := []string{"abe", "zed"}; !reflect.DeepEqual(lanes.lanes, want) {
		t.Errorf("lanes %v, want %v", lanes.lanes, want)
	}
	if zed, abe := lanes.blocks[0], lanes.blocks[1]; abe.lo < zed.hi {
		t.Errorf("abe at [%g, %g) is not above zed at [%g, %g)", abe.lo, abe.hi, zed.lo, zed.hi)
	}
}

func TestQueueSteps_KeepsEveryPeak(t *testing.T) {
	var q []Point
	for i := range 20000 {
		v := i % 7
		if i == 12345 {
			v = 500 // one caller-held spike, for one change
		}
		q = append(q, Point{T: float64(i) / 10, V: v})
	}
	xys := queueSteps(q, 2000)
	if len(xys) > 2*queueBuckets+2 {
		t.Errorf("%d points for %d, want at most %d", len(xys), len(q), 2*queueBuckets+2)
	}
	top := 0.0
	for i, p := range xys {
		top = max(top, p.Y)
		if i > 0 && p.X < xys[i-1].X {
			t.Fatalf("point %d at %g is before the one before, at %g", i, p.X, xys[i-1].X)
		}
	}
	if top != 500 {
		t.Errorf("highest point %g, want the spike's 500", top)
	}
	if last := xys[len(xys)-1]; last.X != 2000 || last.Y != float64(q[len(q)-1].V) {
		t.Errorf("the line ends at %+v, want the last value held to 2000", last)
	}
}

func TestTimeTicks_RoundSteps(t *testing.T) {
	tests := []struct {
		hi   float64
		want []string
	}{
		{1, []string{"0", "1s"}},
		{300, []string{"0", "1m", "2m", "3m", "4m", "5m"}},
		{413, []string{"0", "1m", "2m", "3m", "4m", "5m", "6m"}},
		{4299, []string{"0", "10m", "20m", "30m", "40m", "50m", "1h", "1h10m"}},
		{100, []string{"0", "15s", "30s", "45s", "1m", "1m15s", "1m30s"}},
	}
	for _, tt := range tests {
		var got []string
		for _, tk := range (timeTicks{labels: true}).Ticks(0, tt.hi) {
			got = append(got, tk.Label)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ticks over [0, %g]: %v, want %v", tt.hi, got, tt.want)
		}
	}
}
