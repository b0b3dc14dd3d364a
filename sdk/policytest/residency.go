package policytest

import "github.com/loadout-dev/loadout/sdk"

// Residency (ABI version 3; docs/ABI.md, "Eviction modes"): how the Host
// carries out a swap's evictions, as the run loop does. A running victim
// is put to sleep or stopped as its mode says, the default resolved from
// the model's configured evict: (Host.Evict); an asleep victim is stopped,
// giving back its host memory; an asleep target is woken. The host memory
// sleepers lease is Host.HostMemory, and what they hold is derived from the
// models' HostLeased, never kept twice.

// hostLeased is the host memory the sleepers lease now, in bytes: the sum
// of the models' HostLeased.
func (h *Host) hostLeased() uint64 {
	var n uint64
	for _, m := range h.Models {
		n += m.HostLeased
	}
	return n
}

// hostMemory is Snapshot.Host.
func (h *Host) hostMemory() sdk.HostMemoryInfo {
	return sdk.HostMemoryInfo{Total: h.HostMemory, Leased: h.hostLeased()}
}

// checkModes refuses, with sdk.ErrBadArgument, modes longer than evict, a
// mode no version defines, and a sleep mode for an asleep model.
func (h *Host) checkModes(s sdk.SwapRequest) error {
	if len(s.Modes) > len(s.Evict) {
		return sdk.ErrBadArgument
	}
	for i, e := range s.Evict {
		mode := sdk.ModeOf(s.Modes, i)
		if mode > sdk.EvictSleep2 || (mode.SleepLevel() > 0 && h.Models[e].Asleep()) {
			return sdk.ErrBadArgument
		}
	}
	return nil
}

// resolveModes is how the Host carries out each of s.Evict (s checked by
// checkModes): EvictStop, EvictSleep1 or EvictSleep2, never EvictDefault.
// An asleep victim is stopped first, freeing its host memory for the
// sleeps of the same swap; then each running victim in order: the default
// is the model's configured evict: (auto: level 1 if its backend can and
// the free host memory holds HostBytes1, else level 2 likewise, else a
// stop); an explicit level its backend lacks falls back (2 to 1, else a
// stop), and a sleep the free host memory cannot hold is carried out as a
// stop, logged and counted in SleepsRefused.
func (h *Host) resolveModes(s sdk.SwapRequest) []sdk.EvictMode {
	modes := make([]sdk.EvictMode, len(s.Evict))
	free := h.hostMemory().Free()
	for i, e := range s.Evict {
		if m := h.Models[e]; m.Asleep() {
			modes[i] = sdk.EvictStop
			free += m.HostLeased
		}
	}
	for i, e := range s.Evict {
		m := h.Models[e]
		if m.Asleep() {
			continue
		}
		mode := sdk.ModeOf(s.Modes, i)
		explicit := mode != sdk.EvictDefault
		if !explicit {
			mode = h.Evict[e] // EvictDefault: auto
		}
		var level uint8
		switch mode {
		case sdk.EvictDefault: // auto
			switch {
			case m.CanSleep&1 != 0 && free >= m.HostBytes1:
				level = 1
			case m.CanSleep&2 != 0 && free >= m.HostBytes2:
				level = 2
			}
		case sdk.EvictSleep1, sdk.EvictSleep2:
			level = mode.SleepLevel()
			switch {
			case m.CanSleep&level != 0:
			case level == 2 && m.CanSleep&1 != 0:
				level = 1 // the backend sleeps only at level 1
			default:
				level = 0 // it cannot sleep: a stop
			}
			if need := sleepBytes(m, level); level > 0 && free < need {
				h.SleepsRefused++
				h.tb.Logf("policytest: %q cannot sleep at level %d: it needs %d bytes of host memory, %d are free; stopped instead", e, level, need, free)
				level = 0
			}
		}
		modes[i] = sdk.EvictStop
		if level > 0 {
			modes[i] = sdk.EvictSleep1 + sdk.EvictMode(level-1)
			free -= sleepBytes(m, level)
		}
	}
	return modes
}

// sleepBytes is the host memory m leases asleep at level (0: none).
func sleepBytes(m *sdk.ModelInfo, level uint8) uint64 {
	switch level {
	case 1:
		return m.HostBytes1
	case 2:
		return m.HostBytes2
	}
	return 0
}

// evicted applies the eviction of m in mode (resolved) once its swap is
// done: asleep at the mode's level, holding its host memory, or stopped.
func evicted(m *sdk.ModelInfo, mode sdk.EvictMode) {
	if m.State == sdk.StateStopping {
		m.State = sdk.StateStopped
	}
	m.SleepLevel = mode.SleepLevel()
	m.HostLeased = sleepBytes(m, m.SleepLevel)
}

// woken is the end of a swap that loaded m: awake (ready) or, when the wake
// and the cold start after it failed, failed; either way no longer asleep.
func woken(m *sdk.ModelInfo) {
	m.SleepLevel, m.HostLeased = 0, 0
}

// trimModes drops trailing EvictDefault entries: a shorter list means the
// same (sdk.ModeOf), so modes compare by what they ask.
func trimModes(l []sdk.EvictMode) []sdk.EvictMode {
	for len(l) > 0 && l[len(l)-1] == sdk.EvictDefault {
		l = l[:len(l)-1]
	}
	if len(l) == 0 {
		return nil
	}
	return l
}

func modesString(l []sdk.EvictMode) string {
	s := "["
	for i, m := range l {
		if i > 0 {
			s += ", "
		}
		s += m.String()
	}
	return s + "]"
}
