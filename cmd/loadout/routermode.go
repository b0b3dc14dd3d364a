package main

import (
	"context"

	"github.com/loadout-dev/loadout/backends/llamaserver/routermode"
	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/internal/bounded"
	"github.com/spf13/cobra"
)

// routerModeOptions are llama-server's router-mode inputs, taken by serve
// and config check beside (or instead of) --config.
type routerModeOptions struct {
	modelsDir    string
	modelsPreset string
	llamaServer  string
}

// routerModeHelp is the part of serve's and config check's help on them.
const routerModeHelp = `llama.cpp's router mode as an input: --models-dir DIR serves every GGUF in
DIR as llama-server --models-dir would list it (FILE.gguf is model FILE; a
subdirectory is a split or multimodal model named after it), and
--models-preset FILE.ini adds llama-server's preset sections ([name] with
flags as keys, [*] for every model). Each model is run by the llamaserver
backend with the binary --llama-server names. Alone, they make the whole
configuration (Loadout's defaults: one swap group, so one model at a time);
beside --config, a model id defined in both is an error.`

func addRouterModeFlags(cmd *cobra.Command, o *routerModeOptions) {
	cmd.Flags().StringVar(&o.modelsDir, "models-dir", "", "serve every GGUF model in this directory, named as llama-server's router mode names them")
	cmd.Flags().StringVar(&o.modelsPreset, "models-preset", "", "llama-server's router-mode preset (INI): per-model llama-server flags")
	cmd.Flags().StringVar(&o.llamaServer, "llama-server", "", "the llama-server binary for --models-dir and --models-preset models (default: llama-server on PATH)")
}

func (o routerModeOptions) set() bool { return o.modelsDir != "" || o.modelsPreset != "" }

// externalModels reads the router-mode inputs into config models; nil
// when there are none: the models directory, the preset, and llama-server
// --help (itself bounded at 10 s), within inputLimit (or ctx's deadline).
// The warnings name file and line. Errors: Load's, or the reading not
// ending in time.
func (o routerModeOptions) externalModels(ctx context.Context) ([]config.External, []config.Warning, error) {
	if !o.set() {
		return nil, nil, nil
	}
	type loaded struct {
		models []routermode.Model
		warns  []routermode.Warning
	}
	r, err := bounded.Call(ctx, inputLimit, "reading the router-mode models (--models-dir, --models-preset)", func() (loaded, error) {
		models, warns, err := routermode.Load(ctx, routermode.Input{Dir: o.modelsDir, Preset: o.modelsPreset, Binary: o.llamaServer})
		return loaded{models, warns}, err
	})
	models, warns := r.models, r.warns
	var cw []config.Warning
	for _, w := range warns {
		cw = append(cw, config.Warning{Pos: config.Pos{File: w.File, Line: w.Line}, Message: w.Message})
	}
	if err != nil {
		return nil, cw, err
	}
	out := make([]config.External, 0, len(models))
	for _, m := range models {
		out = append(out, config.External{
			ID: m.ID, Pos: config.Pos{File: m.File, Line: m.Line}, Source: m.Source, Flags: m.Describe(),
			Backend: config.BackendLlamaServer, Options: m.Options,
			UnloadTimeout: m.StopTimeout, Preload: m.LoadOnStartup,
		})
	}
	return out, cw, nil
}
