package gpu

import "fmt"

// Declared is an Inventory of devices declared in the config, with no
// driver behind them: simulated devices for the sim backend, or a box whose
// driver cannot be read. Nothing outside Loadout uses a declared device and
// there is no driver to lag, so every device reports all its memory free
// (Free = Total, Used = 0) and the Ledger's accounting makes a device's free
// memory Total − leased − margin. It measures no process (ProcessMemory is
// empty), so estimates stay in place. A Declared is immutable and safe for
// concurrent use.
type Declared struct {
	devices []Device
	source  string
}

// NewDeclared returns an inventory of the devices, indexed in list order.
// A device with no name is called "gpu<index>".
func NewDeclared(devices []DeclaredDevice) *Declared {
	d := &Declared{source: SourceDeclared, devices: make([]Device, len(devices))}
	for i, dd := range devices {
		name := dd.Name
		if name == "" {
			name = fmt.Sprintf("gpu%d", i)
		}
		d.devices[i] = Device{Index: i, Name: name, Total: dd.Memory, Free: dd.Memory}
	}
	return d
}

// Devices returns the declared devices, each with all its memory free.
func (d *Declared) Devices() ([]Device, error) {
	return append([]Device(nil), d.devices...), nil
}

// ProcessMemory returns an empty map: a declared device measures nothing.
func (d *Declared) ProcessMemory() (map[int]uint64, error) { return map[int]uint64{}, nil }

// Source returns SourceDeclared, or SourceNone for the empty inventory Open
// returns when there is no GPU at all.
func (d *Declared) Source() string { return d.source }
