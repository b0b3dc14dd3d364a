//go:build !(cgo && linux)

package gpu

import (
	"errors"
	"log/slog"
)

// openNVML is unavailable without cgo on Linux: go-nvml needs both.
func openNVML(*slog.Logger) (Inventory, error) {
	return nil, errors.New("this binary was built without NVML support (cgo on Linux)")
}
