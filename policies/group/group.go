package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
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
// registered with sdk.RegisterSwapper. Errors name the offending setting.
func New(h sdk.Host, rawSettings []byte) (sdk.Swapper, error) {
	s := &swapper{
		h:       h,
		groups:  map[string]group{DefaultGroup: {swap: true, exclusive: true}},
		groupOf: make(map[string]string),
	}
	if err := s.parse(rawSettings); err != nil {
		return nil, fmt.Errorf("group settings: %w", err)
	}
	return s, nil
}

// groupJSON is one group in the settings; nil fields take their defaults.
type groupJSON struct {
	Swap       *bool    `json:"swap"`
	Exclusive  *bool    `json:"exclusive"`
	Persistent *bool    `json:"persistent"`
	Members    []string `json:"members"`
}

func (s *swapper) parse(raw []byte) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	for key := range top {
		if key != "groups" {
			return fmt.Errorf("unknown setting %q (known: groups)", key)
		}
	}
	var groups map[string]json.RawMessage
	if val, ok := top["groups"]; ok {
		if err := json.Unmarshal(val, &groups); err != nil {
			return fmt.Errorf("groups: want an object of group names to groups, got %s", val)
		}
	}
	names := make([]string, 0, len(groups))
	for name := range groups {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic errors
	for _, name := range names {
		// DefaultGroup may be given explicitly: the host's config layer
		// writes the implicit group out with the models it holds.
		if name == "" {
			return fmt.Errorf("groups: %q is not a usable group name", name)
		}
		var gj groupJSON
		dec := json.NewDecoder(bytes.NewReader(groups[name]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&gj); err != nil {
			return fmt.Errorf("groups: %s: %w (known: swap, exclusive, persistent, members)", name, err)
		}
		s.groups[name] = group{
			swap:       orDefault(gj.Swap, true),
			exclusive:  orDefault(gj.Exclusive, true),
			persistent: orDefault(gj.Persistent, false),
		}
		for _, m := range gj.Members {
			if m == "" {
				return fmt.Errorf("groups: %s: empty member name", name)
			}
			if other, dup := s.groupOf[m]; dup && other != name {
				return fmt.Errorf("groups: model %q is in two groups: %q and %q", m, other, name)
			}
			s.groupOf[m] = name
		}
	}
	return nil
}

func orDefault(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
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

// OnSwapStart logs the swap once, when it really starts.
// PurePlan claims sdk.PurePlanner: a group plan depends only on the groups,
// the target and the running set, so the host may reuse it.
func (s *swapper) PurePlan() bool { return true }

func (s *swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	s.h.Log(sdk.LevelInfo, fmt.Sprintf("group swap: model=%s group=%s evict=[%s]",
		ev.Target, s.groupName(ev.Target), strings.Join(ev.Evict, ",")))
}
