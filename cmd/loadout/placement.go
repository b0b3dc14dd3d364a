package main

import (
	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/gpu"
)

// gpuPlacement is the configuration's placement rules as the GPU ledger
// applies them: the box's placement: and each constrained model's gpus:
// and split:.
func gpuPlacement(cfg *config.Config) gpu.Placement {
	p := gpu.Placement{Pack: cfg.Placement == config.PlacementPack, Models: map[string]gpu.Constraint{}}
	for id, m := range cfg.Models {
		if m.Constrained() {
			p.Models[id] = gpu.Constraint{GPUs: m.GPUs, Split: m.Split}
		}
	}
	return p
}

// applyPlacement checks cfg's placement constraints (checkPlacement) and,
// when there is a ledger, makes them the rules of every lease it places.
// serve calls it at start, simulate for each run; a reload checks first
// and sets the rules once the new models are in.
func applyPlacement(cfg *config.Config, inv gpu.Inventory, ledger *gpu.Ledger) error {
	if err := checkPlacement(cfg, inv, ledger); err != nil {
		return err
	}
	if ledger != nil {
		ledger.SetPlacement(gpuPlacement(cfg))
	}
	return nil
}

// checkPlacement checks cfg's placement constraints against the devices
// inv has, none without a ledger: an index it lacks, a model that could
// never load under its constraint (config.Errors at file:line).
func checkPlacement(cfg *config.Config, inv gpu.Inventory, ledger *gpu.Ledger) error {
	var totals []uint64
	var margin uint64
	if ledger != nil {
		devices, err := inv.Devices()
		if err != nil {
			return err
		}
		for _, d := range devices {
			totals = append(totals, d.Total)
		}
		margin = ledger.Margin()
	}
	return cfg.CheckPlacement(totals, margin)
}
