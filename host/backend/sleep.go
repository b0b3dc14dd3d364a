package backend

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/loadout-dev/loadout/host/router"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// SleepLevels is the set of sleep levels a plugin that negotiated protocol
// version and announced caps offers, a bit each: 1<<0 for level 1, 1<<1
// for level 2; 0 for none. A plugin of version 1 offers none; of version
// 2, FeatureSleep is level 1 and FeatureSleepLevel2 adds level 2, unless
// FeatureSleepLevel2Only takes level 1 away.
func SleepLevels(version int, caps plugins.Capabilities) uint8 {
	has := func(f string) bool { return slices.Contains(caps.Features, f) }
	if version < 2 || !has(plugins.FeatureSleep) {
		return 0
	}
	levels := uint8(1)
	if has(plugins.FeatureSleepLevel2) {
		levels |= 2
		if has(plugins.FeatureSleepLevel2Only) {
			levels = 2
		}
	}
	return levels
}

var _ router.SleepInstance = (*pluginInstance)(nil)

// SleepLevels implements the router's SleepInstance: the levels the
// model's backend plugin announced (SleepLevels). A backend that announces
// a level may still refuse it for a model whose options configure no sleep
// (the cmd backend): Sleep then fails with plugins.ErrNotSupported.
func (i *pluginInstance) SleepLevels() uint8 {
	return SleepLevels(i.client.ProtocolVersion(), i.caps)
}

// Sleep implements the router's SleepInstance through the plugin's Sleep,
// with ctx's deadline as the backend's timeout (none: the backend's
// default), bounded by plugins.CallLimits (a
// plugin that misses the deadline is killed with its servers). It returns
// once the server's memory is released. Errors wrap
// plugins.ErrNotSupported (a level the backend lacks, or a v1 plugin),
// plugins.ErrNotRunning, plugins.ErrPluginHung or the backend's refusal;
// the caller stops the model after any of them; ErrNotSupported is also
// router.ErrSleepUnsupported, so the model is not asked to sleep again.
func (i *pluginInstance) Sleep(ctx context.Context, level uint8) error {
	select {
	case <-i.exited:
		return fmt.Errorf("sleep model %s: %w", i.model, plugins.ErrNotRunning)
	default:
	}
	if err := i.client.Sleep(ctx, i.model, plugins.SleepLevel(level), timeoutOf(ctx)); err != nil {
		if errors.Is(err, plugins.ErrNotSupported) {
			// The backend sleeps, this model's server does not: the
			// router stops asking.
			return fmt.Errorf("sleep model %s at level %d: %w (%w)", i.model, level, err, router.ErrSleepUnsupported)
		}
		return fmt.Errorf("sleep model %s at level %d: %w", i.model, level, err)
	}
	return nil
}

// Wake implements the router's SleepInstance through the plugin's Wake,
// with ctx's deadline as the backend's timeout (none: the backend's
// default), bounded by plugins.CallLimits; it
// returns once the server serves. A wake that hangs in the server ends at
// the backend's timeout with an error; one that hangs in the plugin ends
// at the call's limit, the plugin killed.
func (i *pluginInstance) Wake(ctx context.Context) error {
	select {
	case <-i.exited:
		return fmt.Errorf("wake model %s: %w", i.model, plugins.ErrNotRunning)
	default:
	}
	if err := i.client.Wake(ctx, i.model, timeoutOf(ctx)); err != nil {
		return fmt.Errorf("wake model %s: %w", i.model, err)
	}
	return nil
}

// timeoutOf is the time left before ctx's deadline, for a backend to bound
// its own work by and answer in time; 0 (the backend's default) without a
// deadline.
func timeoutOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 0
}

// HostBytes implements the router's SleepInstance: the host memory in
// bytes the sleeping server holds, as its backend's Residency reports it
// (plugins.FeatureResidency, a non-zero HostBytes), else the sum of the
// resident set sizes (VmRSS in /proc/PID/status) of the server's pids as
// its backend's Stats lists them; 0 when neither tells.
func (i *pluginInstance) HostBytes(ctx context.Context) (uint64, error) {
	if i.client.ProtocolVersion() >= 2 && slices.Contains(i.caps.Features, plugins.FeatureResidency) {
		r, err := i.client.Residency(ctx, i.model)
		switch {
		case err == nil && r.HostBytes > 0:
			return r.HostBytes, nil
		case err != nil && !errors.Is(err, plugins.ErrNotSupported):
			return 0, fmt.Errorf("model %s: residency: %w", i.model, err)
		}
	}
	pids, _, err := i.Memory(ctx)
	if err != nil {
		return 0, fmt.Errorf("model %s: stats: %w", i.model, err)
	}
	return rssBytes(pids), nil
}

// rssBytes sums the resident set sizes of pids from /proc/PID/status
// (VmRSS, in kB); a process that is gone or unreadable counts 0.
func rssBytes(pids []int) uint64 {
	var total uint64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		total += vmRSS(b)
	}
	return total
}

// vmRSS reads the VmRSS line of a /proc/PID/status file, in bytes.
func vmRSS(status []byte) uint64 {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}
