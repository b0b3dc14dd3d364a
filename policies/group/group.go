package main

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// DefaultGroup is the name of the implicit group of the models in no group.
const DefaultGroup = "(default)"

// group is one group's configuration.
type group struct {
	swap       bool // evict running members when a member loads
	exclusive  bool // evict other groups' running models when a member loads
	persistent bool // never evicted by another group
}

// swapper is the group swapper.
type swapper struct {
	h       sdk.Host
	groups  map[string]group
	groupOf map[string]string // model → group; absent: DefaultGroup
}

// New makes the group swapper from its settings JSON; it is the factory
// registered with sdk.RegisterSwapper. Errors are *sdksettings.Error
// naming the offending setting's path.
func New(h sdk.Host, rawSettings []byte) (sdk.Swapper, error) {
	s := &swapper{
		h:       h,
		groups:  map[string]group{DefaultGroup: {swap: true, exclusive: true}},
		groupOf: make(map[string]string),
	}
	if err := s.parse(rawSettings); err != nil {
		return nil, err
	}
	return s, nil
}

// parse reads {"groups": {"NAME": {"swap", "exclusive", "persistent",
// "members"}}}: swap and exclusive default to true, persistent to false,
// members are required.
func (s *swapper) parse(raw []byte) error {
	root, err := sdksettings.Decode(raw)
	if err != nil {
		return err
	}
	top, err := root.Object("groups")
	if err != nil {
		return err
	}
	groups, err := top.Get("groups").Object()
	if err != nil {
		return err
	}
	where := map[string]string{} // model → the path that first listed it
	for _, name := range groups.Keys() {
		gv := groups.Get(name)
		switch name {
		case "":
			return sdksettings.NewError(gv.Path(), strconv.Quote(name)+" is not a usable group name")
		case DefaultGroup:
			return sdksettings.NewError(gv.Path(), DefaultGroup+" is the name of the implicit group of ungrouped models; pick another name")
		}
		g, err := gv.Object("swap", "exclusive", "persistent", "members")
		if err != nil {
			return err
		}
		cfg := group{swap: true, exclusive: true}
		for _, f := range []struct {
			key string
			dst *bool
		}{{"swap", &cfg.swap}, {"exclusive", &cfg.exclusive}, {"persistent", &cfg.persistent}} {
			if v := g.Get(f.key); !v.IsNull() {
				if *f.dst, err = v.Bool(); err != nil {
					return err
				}
			}
		}
		if !g.Has("members") {
			return sdksettings.NewError(gv.Path(), "members is required")
		}
		members, err := g.Get("members").List()
		if err != nil {
			return err
		}
		for _, mv := range members {
			m, err := mv.String()
			if err != nil {
				return err
			}
			switch other, dup := s.groupOf[m]; {
			case m == "":
				return sdksettings.NewError(mv.Path(), "empty member name")
			case dup && other == name:
				return sdksettings.NewError(mv.Path(), "model "+strconv.Quote(m)+" is listed twice in group "+strconv.Quote(name)+" ("+where[m]+")")
			case dup:
				return sdksettings.NewError(mv.Path(), "model "+strconv.Quote(m)+" is in two groups: "+strconv.Quote(other)+" ("+where[m]+") and "+strconv.Quote(name)+"; a model can belong to only one group")
			}
			s.groupOf[m] = name
			where[m] = mv.Path()
		}
		s.groups[name] = cfg
	}
	return nil
}

// groupName returns the model's group.
func (s *swapper) groupName(model string) string {
	if g, ok := s.groupOf[model]; ok {
		return g
	}
	return DefaultGroup
}

// Plan evicts, in the order of q.Running, every running model the groups
// say must stop for q.Target; it places nothing.
func (s *swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	tg := s.groupName(q.Target)
	tcfg := s.groups[tg]
	var evict []string
	for _, m := range q.Running {
		if m == q.Target {
			continue
		}
		mg := s.groupName(m)
		if (mg == tg && tcfg.swap) || (mg != tg && tcfg.exclusive && !s.groups[mg].persistent) {
			evict = append(evict, m)
		}
	}
	return sdk.Plan{Evict: evict}, nil
}

// PurePlan claims sdk.PurePlanner: a group plan depends only on the groups,
// the target and the running set, so the host may reuse it.
func (s *swapper) PurePlan() bool { return true }

// PlanJob chooses the GPUs a GPU job takes whole (sdk.JobPlanner): free
// GPUs first, then GPUs whose every model may go, lowest index first. A
// model may go when it is ready, idle (no request in flight) and unpinned,
// and its group is not persistent: a persistent group is evicted by
// nothing, a job included.
func (s *swapper) PlanJob(q sdk.JobPlanRequest) (sdk.Plan, error) {
	snap := s.h.Snapshot()
	evictable := func(name string) bool {
		i := slices.IndexFunc(snap.Models, func(m sdk.ModelInfo) bool { return m.Name == name })
		if i < 0 {
			return false
		}
		m := &snap.Models[i]
		return m.State == sdk.StateReady && m.InFlight == 0 && !m.Pinned && !s.groups[s.groupName(name)].persistent
	}
	chosen, evict, ok := placement.Whole(int(q.GPUs), placement.JobCandidates(q.Candidates, snap.Models), evictable)
	if !ok {
		return sdk.Plan{}, errors.New("the job needs " + strconv.FormatUint(uint64(q.GPUs), 10) + " whole GPU(s); too few of the " +
			strconv.Itoa(len(q.Candidates)) + " it may take are free or hold only idle, unpinned models outside persistent groups")
	}
	return sdk.Plan{Evict: evict, Devices: chosen}, nil
}

// OnSwapStart logs the swap once, when it really starts.
func (s *swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	s.h.Log(sdk.LevelInfo, "group swap: model="+ev.Target+" group="+s.groupName(ev.Target)+" evict=["+strings.Join(ev.Evict, ",")+"]")
}
