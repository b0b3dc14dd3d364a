package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/peers"
)

// startPeers makes the configuration's peers (llama-swap's peers:) and
// starts their health checks, each change of a peer's health published on
// bus; nil when there are none. A peer configured as it is in previous
// (the running set a reload replaces, or nil) keeps its health there.
// stop ends the checks. A peer that does not answer now is logged as
// down, not refused: it may come up later.
func startPeers(ctx context.Context, cfg *config.Config, previous *peers.Set, bus *events.Bus, log *slog.Logger) (set *peers.Set, stop func(), err error) {
	if len(cfg.Peers) == 0 {
		return nil, func() {}, nil
	}
	pc := peers.Config{Logger: log, Previous: previous, OnChange: func(st peers.Status) { bus.Publish(events.TypePeer, st) }}
	for _, id := range cfg.PeerIDs() {
		p := cfg.Peers[id]
		u, err := url.Parse(p.Proxy)
		if err != nil {
			return nil, nil, fmt.Errorf("peer %s: %w", id, err)
		}
		pc.Peers = append(pc.Peers, peers.Peer{ID: id, URL: u, APIKey: p.APIKey, Models: p.Models,
			Interval: p.HealthInterval, Timeout: p.HealthTimeout, Failures: p.HealthFailures, CoolDown: p.HealthCoolDown,
			Timeouts: p.Timeouts, Filters: p.Filters})
	}
	set, err = peers.New(pc)
	if err != nil {
		return nil, nil, err
	}
	set.Start(ctx)
	return set, set.Stop, nil
}

// peerTable is cfg's peers in a comparable form: a reload compares two.
func peerTable(cfg *config.Config) []config.Peer {
	var out []config.Peer
	for _, id := range cfg.PeerIDs() {
		out = append(out, *cfg.Peers[id])
	}
	return out
}
