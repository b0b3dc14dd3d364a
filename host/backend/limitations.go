package backend

import (
	"fmt"
	"slices"

	"github.com/loadout-dev/loadout/plugins"
)

// Limitations says, one sentence each, what this host cannot do with a
// backend plugin that negotiated protocol version and announced caps, and
// what it does instead: the rule behind the log line at a plugin's launch
// and `loadout backend check`'s report. None for a plugin of the newest
// version that announces every feature.
func Limitations(version int, caps plugins.Capabilities) []string {
	var out []string
	has := func(f string) bool { return slices.Contains(caps.Features, f) }
	if version < 2 {
		out = append(out, fmt.Sprintf("speaks protocol version %d (this host speaks %d to %d): "+
			"it cannot sleep or wake models, so they are stopped when evicted, and it reports no residency; "+
			"rebuild it against a newer %s to add them", version, plugins.OldestProtocolVersion, plugins.ProtocolVersion, plugins.ModulePath))
	} else {
		if !has(plugins.FeatureSleep) {
			out = append(out, "cannot sleep models (no \""+plugins.FeatureSleep+"\" feature): they are stopped when evicted")
		} else if has(plugins.FeatureSleepLevel2Only) {
			out = append(out, "sleeps at level 2 only (the \""+plugins.FeatureSleepLevel2Only+"\" feature): its models are never put to sleep at level 1")
		} else if !has(plugins.FeatureSleepLevel2) {
			out = append(out, "sleeps at level 1 only (no \""+plugins.FeatureSleepLevel2+"\" feature): a level 2 sleep is done at level 1")
		}
		if !has(plugins.FeatureResidency) {
			out = append(out, "reports no residency (no \""+plugins.FeatureResidency+"\" feature)")
		}
	}
	if !has(plugins.FeatureEstimate) {
		out = append(out, "gives no VRAM estimates (no \""+plugins.FeatureEstimate+"\" feature): a model's vram comes from the config, else from its measured use once it runs")
	}
	if !has(plugins.FeatureMeasuredMemory) {
		out = append(out, "measures no memory (no \""+plugins.FeatureMeasuredMemory+"\" feature): the host measures its servers by pid")
	}
	return out
}
