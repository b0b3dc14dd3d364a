// Command snapreader is a swapper that reads the snapshot both ways on
// every plan: through sdk.ReadSnapshotChanges into storage it keeps (the
// snapshot_delta import) and whole through Host.Snapshot (the snapshot
// import), and fails the plan when the two differ. It logs what the delta
// said changed, "changed=[…] all=BOOL models=N". Targets steer it:
// "reset" drops the kept snapshot first (the next read must be whole),
// "other" reads into a second snapshot it keeps, "panic" panics (the host
// re-instantiates it, with no snapshot on either side).
package main

import (
	"fmt"
	"reflect"

	"github.com/loadout-dev/loadout/sdk"
)

type swapper struct {
	h            sdk.Host
	kept, second sdk.Snapshot
	changed      []int
}

func init() {
	sdk.RegisterSwapper(func(h sdk.Host, _ []byte) (sdk.Swapper, error) { return &swapper{h: h}, nil })
}

func (s *swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	dst := &s.kept
	switch q.Target {
	case "reset":
		s.kept = sdk.Snapshot{}
	case "other":
		dst = &s.second
	case "panic":
		panic("snapreader: asked to")
	}
	var all bool
	s.changed, all = sdk.ReadSnapshotChanges(s.h, dst, s.changed[:0])
	whole := s.h.Snapshot()
	if !reflect.DeepEqual(*dst, whole) {
		return sdk.Plan{}, fmt.Errorf("the delta read gave %+v, the whole read %+v", *dst, whole)
	}
	s.h.Log(sdk.LevelInfo, fmt.Sprintf("changed=%v all=%t models=%d", s.changed, all, len(dst.Models)))
	return sdk.Plan{}, nil
}

func (s *swapper) OnSwapStart(sdk.SwapStartEvent) {}

func main() {}
