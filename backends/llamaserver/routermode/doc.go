// Package routermode reads llama.cpp's router-mode inputs, a models
// directory (llama-server --models-dir) and a preset file
// (--models-preset), as models of Loadout's llamaserver backend, with the
// rules llama-server's router mode applies to them (tools/server/README.md,
// "Using multiple models"; common/preset.cpp), checked against the built
// llama-server 0.3.36:
//
//   - A models directory: each FILE.gguf at its top is a model named FILE
//     (every ".gguf" removed from the name; the suffix is case-sensitive);
//     a file whose name contains "mmproj" is a projector, never a model.
//     Each subdirectory holding a GGUF is a model named after the
//     subdirectory: its model file is the one containing "-00001-of-" (the
//     first part of a split model) or else the other GGUF, and a GGUF whose
//     name contains "mmproj" is its multimodal projector (--mmproj).
//     Deeper directories are not looked at.
//   - A preset: INI, "[name]" sections, "key = value" lines, ";" or "#"
//     comments (also after a value). A key is a llama-server flag name
//     without its dashes, long or short, or its LLAMA_ARG_* name; the
//     "[*]" section's keys apply to every model, a model's own section
//     overrides them, and a section named like a models-dir model adds to
//     (and overrides) what the directory gave it. A section for any other
//     name must say which GGUF (model = PATH, relative to the working
//     directory as llama-server's are). The preset-only keys
//     load-on-startup and stop-timeout are honoured (Loadout's preload and
//     the model's unloadTimeout).
//
// The flags become the backend's options through the backend's own table
// (llamaserver.OptionsFromArgs): what is not one of its options goes to
// extra_args. Flags are checked against the --help of the llama-server that
// will run the models (llamaserver.ReadFlags).
//
// Where llama-server is lenient, this package reports instead, so that
// nothing is lost without a word: a preset with a syntax error, an unknown
// flag, a section defined twice, keys outside a section, or a GGUF that is
// not there is an error naming file:line; a models directory that does not
// exist or holds no GGUF is an error. Where llama-server's result depends
// on directory order (a subdirectory with two candidate model files),
// Loadout takes the first by name and warns.
//
// The package knows nothing of Loadout's configuration: cmd/loadout hands
// its Models to host/config.
package routermode
