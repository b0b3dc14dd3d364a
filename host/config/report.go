package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// Report renders a loaded configuration for people: the text of
// `loadout config check FILE`. It lists the global settings, every model with
// its backend, port, group, TTL, VRAM, priority and aliases (and each
// replica, with its own port), the commands, the
// groups, the scheduler and router with the JSON settings each receives, the
// GPUs, the placement rules when there are any, the peers, the preload
// list, how llama-swap's legacy keys were mapped, and the warnings. API
// keys are counted, never shown.
func Report(cfg *Config, warnings []Warning) string {
	var b strings.Builder
	ids := cfg.ModelIDs()
	fmt.Fprintf(&b, "%s%s: %s, %s, %s\n", cfg.File, describeFiles(cfg.Files),
		plural(len(cfg.ServedIDs()), "model"), plural(len(cfg.Groups), "group"), plural(len(cfg.GPUs), "GPU"))

	b.WriteString("\nSettings\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  logLevel\t%s\n", cfg.LogLevel)
	fmt.Fprintf(tw, "  healthCheckTimeout\t%s\n", duration(cfg.HealthCheckTimeout))
	fmt.Fprintf(tw, "  globalTTL\t%s\n", ttl(cfg.GlobalTTL))
	fmt.Fprintf(tw, "  unloadTimeout\t%s\n", duration(cfg.UnloadTimeout))
	fmt.Fprintf(tw, "  startPort\t%d\n", cfg.StartPort)
	fmt.Fprintf(tw, "  apiKeys\t%s\n", apiKeys(len(cfg.APIKeys)))
	fmt.Fprintf(tw, "  sendLoadingState\t%t\n", cfg.SendLoadingState)
	fmt.Fprintf(tw, "  includeAliasesInList\t%t\n", cfg.IncludeAliasesInList)
	fmt.Fprintf(tw, "  logToStdout\t%s\n", cfg.LogToStdout)
	fmt.Fprintf(tw, "  hostMemory\t%s\n", hostMemory(cfg.HostMemory))
	fmt.Fprintf(tw, "  evict\t%s\n", cfg.Evict)
	fmt.Fprintf(tw, "  wakeTimeout\t%s\n", duration(cfg.WakeTimeout))
	switch {
	case cfg.LogTime == nil:
		fmt.Fprintf(tw, "  logTimeFormat\t%s\n", "Loadout's (RFC 3339, milliseconds)")
	case *cfg.LogTime == "":
		fmt.Fprintf(tw, "  logTimeFormat\t%s\n", "no timestamp")
	default:
		fmt.Fprintf(tw, "  logTimeFormat\t%s\n", *cfg.LogTime)
	}
	paths := make([]string, len(cfg.IgnorePaths))
	for i, re := range cfg.IgnorePaths {
		paths[i] = re.String()
	}
	fmt.Fprintf(tw, "  upstream.ignorePaths\t%s (never load a model: 409 while it is not ready)\n", strings.Join(paths, "  "))
	sessions := "off"
	if len(cfg.SessionHeaders) > 0 {
		sessions = strings.Join(cfg.SessionHeaders, ", ") + " (the client id of a request that names none)"
	}
	fmt.Fprintf(tw, "  ui.activity.session_id\t%s\n", sessions)
	if cfg.EventRing > 0 {
		fmt.Fprintf(tw, "  metricsMaxInMemory\t%d events kept in memory for /api/events and the UI\n", cfg.EventRing)
	}
	if len(cfg.Macros) > 0 {
		names := make([]string, len(cfg.Macros))
		for i, m := range cfg.Macros {
			names[i] = m.Name
		}
		fmt.Fprintf(tw, "  macros\t%s\n", strings.Join(names, ", "))
	}
	tw.Flush()

	b.WriteString("\nModels\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tBACKEND\tPORT\tGROUP\tTTL\tVRAM\tPRIORITY\tALIASES")
	for _, id := range ids {
		m := cfg.Models[id]
		group := "-"
		if g := cfg.GroupOf(id); g != nil {
			group = g.Name
		}
		port, vram := "-", "backend estimate"
		if m.Port != 0 {
			port = fmt.Sprint(m.Port)
		}
		if m.VRAM != 0 {
			vram = formatSize(m.VRAM)
		}
		prio := fmt.Sprint(m.Priority)
		if m.Pinned {
			prio += " pinned"
		}
		aliases := strings.Join(m.Aliases, ", ")
		switch {
		case m.ReplicaOf != "":
			aliases = fmt.Sprintf("(replica %d of %s)", m.Replica, m.ReplicaOf)
		case m.MaxReplicas > 1 && m.MinReplicas == m.MaxReplicas:
			aliases = strings.TrimPrefix(aliases+fmt.Sprintf(", (%d replicas)", m.MaxReplicas), ", ")
		case m.MaxReplicas > 1:
			aliases = strings.TrimPrefix(aliases+fmt.Sprintf(", (%d to %d replicas)", m.MinReplicas, m.MaxReplicas), ", ")
		case aliases == "":
			aliases = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, m.Backend, port, group, ttl(m.TTL), vram, prio, aliases)
	}
	tw.Flush()

	b.WriteString("\nUpstreams\n")
	for _, id := range ids {
		m := cfg.Models[id]
		switch {
		case m.Backend == BackendCmd:
			fmt.Fprintf(&b, "  %s: %s\n      proxy %s, health check %s\n", id, m.Cmd, m.Proxy, health(m.CheckEndpoint))
		default:
			opts, _ := m.OptionsJSON()
			fmt.Fprintf(&b, "  %s: backend %s, options %s\n", id, m.Backend, opts)
		}
		fmt.Fprintf(&b, "      evict %s: %s\n", m.Evict, evictReport(m))
		if m.Timeouts != DefaultTimeouts {
			fmt.Fprintf(&b, "      timeouts %s\n", m.Timeouts)
		}
		if !m.Filters.Empty() {
			fmt.Fprintf(&b, "      filters (JSON bodies): %s\n", filterReport(m.Filters))
		}
		if id == ComfyUIModel {
			fmt.Fprintf(&b, "      served at /comfyui/ (llama-swap's ComfyUI passthrough; only that page loads it), concurrencyLimit %d\n", m.ConcurrencyLimit)
		}
		if m.IgnoreWebsockets {
			b.WriteString("      compat.ignoreWebsockets: a WebSocket through /upstream never loads the model and is not counted in flight\n")
		}
		if !m.Capabilities.Empty() {
			fmt.Fprintf(&b, "      capabilities (in /v1/models): %s\n", m.Capabilities)
		}
		if len(m.Metadata) > 0 {
			js, _ := json.Marshal(m.Metadata)
			fmt.Fprintf(&b, "      metadata (in /v1/models meta.llamaswap): %s\n", js)
		}
	}

	b.WriteString("\nGroups (what may run together)\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tSWAP\tEXCLUSIVE\tPERSISTENT\tMEMBERS")
	for _, g := range cfg.Groups {
		name := g.Name
		if g.Implicit {
			name += " (implicit: models in no group)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", name, yes(g.Swap), yes(g.Exclusive), yes(g.Persistent), strings.Join(g.Members, ", "))
	}
	tw.Flush()
	if cfg.Routing.Router.Use != RouterGroup || cfg.Routing.Router.Wasm != "" {
		fmt.Fprintf(&b, "  (the router is %s, not group: groups only label models in its snapshot)\n", cfg.Routing.Router.Name())
	}

	externalReport(&b, cfg)

	b.WriteString("\nRouting\n")
	for _, r := range []struct {
		role string
		p    Policy
		js   func() ([]byte, error)
	}{
		{"scheduler", cfg.Routing.Scheduler, cfg.SchedulerSettingsJSON},
		{"router", cfg.Routing.Router, cfg.RouterSettingsJSON},
	} {
		kind := "built-in"
		if r.p.Wasm != "" {
			kind = "wasm module"
		}
		js, err := r.js()
		if err != nil {
			js = []byte("error: " + err.Error())
		}
		fmt.Fprintf(&b, "  %s: %s (%s)\n      settings %s\n", r.role, r.p.Name(), kind, js)
	}

	if len(cfg.GPUs) > 0 {
		b.WriteString("\nGPUs (declared; used when NVML is not available)\n")
		for _, g := range cfg.GPUs {
			fmt.Fprintf(&b, "  %s: %s\n", g.Name, formatSize(g.Memory))
		}
	}
	var constrained []string
	for _, id := range ids {
		if m := cfg.Models[id]; m.Constrained() {
			c := []string{}
			if len(m.GPUs) > 0 {
				c = append(c, "gpus "+formatIndices(m.GPUs))
			}
			c = append(c, "split "+m.Split.String())
			constrained = append(constrained, fmt.Sprintf("  %s: %s\n", id, strings.Join(c, ", ")))
		}
	}
	if cfg.Placement == PlacementPack || len(constrained) > 0 {
		fmt.Fprintf(&b, "\nPlacement: %s\n%s", cfg.Placement, strings.Join(constrained, ""))
	}
	if len(cfg.Peers) > 0 {
		b.WriteString("\nPeers (their models are PEER/MODEL, and MODEL where unambiguous)\n")
		for _, id := range cfg.PeerIDs() {
			p := cfg.Peers[id]
			key := "no API key"
			if p.APIKey != "" {
				key = "an API key"
			}
			fmt.Fprintf(&b, "  %s: %s, models %s\n      health check every %s (timeout %s), %s\n",
				id, p.Proxy, strings.Join(p.Models, ", "), duration(p.HealthInterval), duration(p.HealthTimeout), key)
		}
	}
	if len(cfg.Preload) > 0 {
		fmt.Fprintf(&b, "\nPreload at startup: %s\n", strings.Join(cfg.Preload, ", "))
	}
	if len(cfg.notes) > 0 {
		b.WriteString("\nllama-swap keys mapped\n")
		for _, n := range cfg.notes {
			fmt.Fprintf(&b, "  %s\n", n)
		}
	}
	if len(warnings) > 0 {
		fmt.Fprintf(&b, "\n%s\n", plural(len(warnings), "warning"))
		for _, w := range warnings {
			fmt.Fprintf(&b, "  %s\n", w)
		}
	}
	return b.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func apiKeys(n int) string {
	if n == 0 {
		return "none (every request allowed)"
	}
	return plural(n, "key") + " required"
}

func health(ep string) string {
	if ep == "" {
		return "none"
	}
	return ep
}

func ttl(d time.Duration) string {
	if d == 0 {
		return "never"
	}
	return duration(d)
}

// duration prints 5m rather than 5m0s.
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
