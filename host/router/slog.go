package router

import (
	"log/slog"

	"github.com/loadout-dev/loadout/sdk"
)

func slogLevel(l sdk.LogLevel) slog.Level { return slog.Level(l) }
