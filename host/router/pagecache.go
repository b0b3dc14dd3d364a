package router

import (
	"slices"
)

// Read-ahead (DESIGN.md, "Residency"): a request the scheduler holds for
// a stopped model says which model loads next, so its weight files are
// read into the page cache while it waits, and its cold load reads them
// from memory. The pages are leased against host memory like a sleeper's
// weights, so read-ahead never pushes the machine into swap; the lease
// ends when the load ends (the process has read them), and a sleep that
// needs the room drops the read-ahead first (the oldest first).

// warmKey is a read-ahead's key in the host ledger, apart from the
// model's own (sleeper) lease.
func warmKey(name string) string { return "\x00read-ahead:" + name }

// readAhead reads m's weights ahead when m is stopped, not asleep, has
// weight files, and host memory holds them.
func (r *Router) readAhead(m *model) {
	l := &r.loop
	key := warmKey(m.name)
	if len(m.cfg.Weights) == 0 || m.cfg.WeightBytes == 0 || m.state.Running() || m.asleep != nil || l.swaps[m.name] != nil {
		return
	}
	if _, leased := l.host.leases[key]; leased || m.cfg.WeightBytes > l.host.free() {
		return
	}
	l.host.lease(key, m.cfg.WeightBytes)
	l.warm = append(l.warm, m.name)
	r.log.Info("reading weights ahead into the page cache", "model", m.name, "mib", m.cfg.WeightBytes>>20)
	r.exec.pageCache(m.name, m.cfg.Weights, false)
}

// readAheadDone ends m's read-ahead lease: its load has read the pages
// (or failed; the pages stay cached until the kernel needs them).
func (r *Router) readAheadDone(m *model) {
	l := &r.loop
	if _, ok := l.host.leases[warmKey(m.name)]; !ok {
		return
	}
	l.host.release(warmKey(m.name))
	l.warm = slices.DeleteFunc(l.warm, func(n string) bool { return n == m.name })
}

// reclaimable is the host memory read-ahead holds, which a sleep may take.
func (l *loopState) reclaimable() uint64 {
	var n uint64
	for _, name := range l.warm {
		n += l.host.leases[warmKey(name)]
	}
	return n
}

// makeRoom drops read-ahead, the oldest first, until host memory has
// need bytes free (and is not over-committed: SetHostMemory's makeRoom(0))
// or none is left.
func (r *Router) makeRoom(need uint64) {
	l := &r.loop
	for (l.host.free() < need || l.host.leased > l.host.total) && len(l.warm) > 0 {
		name := l.warm[0]
		l.warm = l.warm[1:]
		l.host.release(warmKey(name))
		if m := l.models[name]; m != nil {
			r.log.Info("dropping read-ahead weights to make room in host memory", "model", name)
			r.exec.pageCache(name, m.cfg.Weights, true)
		}
	}
}
