package events

import (
	"errors"
	"fmt"
	"testing"
)

func ids(evs []*Event) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

func TestBus_ReplaysAndResumesFromLastEventID(t *testing.T) {
	b := New(8)
	for i := range 5 {
		b.Publish(TypeModel, map[string]int{"i": i})
	}
	all, err := b.Subscribe(0).Ready(100)
	if err != nil || fmt.Sprint(ids(all)) != "[1 2 3 4 5]" {
		t.Fatalf("replay = %v, %v", ids(all), err)
	}
	if got := string(all[2].JSON()); got != `{"i":2}` {
		t.Fatalf("data = %s", got)
	}
	s := b.Subscribe(3)
	got, _ := s.Ready(100)
	if fmt.Sprint(ids(got)) != "[4 5]" || s.Gap() {
		t.Fatalf("resume after 3 = %v gap=%t", ids(got), s.Gap())
	}
	b.Publish(TypeSwapStart, nil)
	select {
	case <-s.Wake():
	default:
		t.Fatal("subscriber not woken by a publish")
	}
	got, _ = s.Ready(100)
	if fmt.Sprint(ids(got)) != "[6]" || got[0].Type != TypeSwapStart {
		t.Fatalf("after publish = %v", ids(got))
	}
}

func TestBus_ResumeOlderThanRingReportsGap(t *testing.T) {
	b := New(4)
	for range 10 {
		b.Publish(TypeModel, nil)
	}
	s := b.Subscribe(2)
	got, err := s.Ready(100)
	if err != nil || fmt.Sprint(ids(got)) != "[7 8 9 10]" || !s.Gap() {
		t.Fatalf("resume after 2 = %v gap=%t err=%v", ids(got), s.Gap(), err)
	}
	if s := b.Subscribe(0); s.Gap() {
		t.Fatal("a fresh subscriber has no gap")
	}
	// An id past this run's newest is a previous run's: this run's
	// events are replayed and the reader told its state is stale (it was
	// sent only new events, silently).
	s = b.Subscribe(50)
	got, err = s.Ready(100)
	if err != nil || fmt.Sprint(ids(got)) != "[7 8 9 10]" || !s.Gap() {
		t.Fatalf("resume after 50 (a previous run's id) = %v gap=%t err=%v", ids(got), s.Gap(), err)
	}
	if s := b.Subscribe(10); s.Gap() {
		t.Fatal("a resume at the newest id has no gap")
	}
}

// A subscriber that does not read is dropped once the ring laps it;
// publishing never blocks on it.
func TestBus_SlowSubscriberIsDropped(t *testing.T) {
	b := New(4)
	slow := b.Subscribe(0)
	for range 100 {
		b.Publish(TypeRequest, nil)
	}
	if _, err := slow.Ready(10); !errors.Is(err, ErrDropped) {
		t.Fatalf("Ready = %v, want ErrDropped", err)
	}
	if _, open := <-slow.Wake(); open {
		// one pending wake may be buffered; the channel must then close
		if _, open := <-slow.Wake(); open {
			t.Fatal("dropped subscriber's wake channel not closed")
		}
	}
}

func TestBus_CloseEndsSubscribers(t *testing.T) {
	b := New(4)
	s := b.Subscribe(0)
	b.Close()
	if _, open := <-s.Wake(); open {
		t.Fatal("wake not closed")
	}
	if _, err := s.Ready(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ready = %v, want ErrClosed", err)
	}
	b.Publish(TypeModel, nil) // no panic, dropped
}

func BenchmarkBus_Publish(b *testing.B) {
	bus := New(0)
	for range 4 {
		bus.Subscribe(0)
	}
	data := map[string]string{"model": "a"}
	b.ReportAllocs()
	for b.Loop() {
		bus.Publish(TypeModel, data)
	}
}

// History keeps each type's newest events however many events of other
// types filled the ring since: a flood of request events does not push the
// last swap out of the timeline.
func TestBus_History_KeepsTypesPastTheRing(t *testing.T) {
	b := New(8)
	b.Publish(TypeSwapStart, "s1")
	b.Publish(TypeEviction, "e1")
	for range 100 {
		b.Publish(TypeRequest, "r")
	}
	b.Publish(TypeSwapEnd, "s2")
	evs, last := b.History([]string{TypeSwapStart, TypeSwapEnd, TypeEviction, TypeSwapStart}, 0)
	if fmt.Sprint(ids(evs)) != "[1 2 103]" || last != 103 {
		t.Fatalf("history = %v, last %d; want [1 2 103], 103", ids(evs), last)
	}
	if evs[0].Type != TypeSwapStart || evs[0].Time.IsZero() {
		t.Fatalf("first = %+v", evs[0])
	}
	if evs, _ = b.History([]string{TypeSwapStart, TypeSwapEnd, TypeEviction}, 2); fmt.Sprint(ids(evs)) != "[2 103]" {
		t.Fatalf("limit 2 = %v, want the newest two [2 103]", ids(evs))
	}
	// Each type keeps its newest KeptPerType.
	evs, _ = b.History([]string{TypeRequest}, 0)
	if len(evs) != 100 {
		t.Fatalf("%d requests kept, want 100", len(evs))
	}
	for range KeptPerType {
		b.Publish(TypeRequest, "r")
	}
	evs, _ = b.History([]string{TypeRequest}, 0)
	if len(evs) != KeptPerType || evs[len(evs)-1].ID != b.LastID() {
		t.Fatalf("%d requests kept (newest %d), want %d ending at %d", len(evs), evs[len(evs)-1].ID, KeptPerType, b.LastID())
	}
}
