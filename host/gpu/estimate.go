package gpu

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// EstimateSource says where a VRAM estimate came from.
type EstimateSource string

// Estimate sources, in the order Estimate tries them.
const (
	FromConfig   EstimateSource = "config"    // the model's `vram:` in the config
	FromBackend  EstimateSource = "backend"   // the backend plugin's Estimate (GGUF metadata for llama-server)
	FromFileSize EstimateSource = "file-size" // FileSizeHeuristic on the weights
	FromNothing  EstimateSource = "unknown"   // none of them: the model is placed with no memory figure
)

// Estimate returns a model's VRAM need in bytes and where the figure came
// from, taking the first that is known (non-zero): declared (the config's
// `vram:`), backend (the backend's Estimate, summed over devices), then
// FileSizeHeuristic(weights) when weights names a file or directory. Once
// the model is loaded its measured usage replaces whichever was used
// (Ledger.Resize).
func Estimate(declared, backend uint64, weights string) (uint64, EstimateSource) {
	switch {
	case declared > 0:
		return declared, FromConfig
	case backend > 0:
		return backend, FromBackend
	}
	if weights != "" {
		if b := FileSizeHeuristic(weights); b > 0 {
			return b, FromFileSize
		}
	}
	return 0, FromNothing
}

// HeuristicOverhead is the fixed part of FileSizeHeuristic, in bytes: about
// what a CUDA context and the runtime's own buffers take in a model server
// process before any weight is loaded (300–500 MiB on current drivers).
const HeuristicOverhead uint64 = 512 << 20

// weightExts are the files whose sizes FileSizeHeuristic adds up in a
// directory (a Hugging Face snapshot for vLLM, a folder of GGUF parts).
var weightExts = []string{".gguf", ".safetensors", ".bin", ".pt", ".pth"}

// splitGGUF matches one part of a split GGUF file, llama.cpp's
// "<name>-00001-of-00003.gguf"; all parts load together.
var splitGGUF = regexp.MustCompile(`^(.*)-\d{5}-of-(\d{5})\.gguf$`)

// FileSizeHeuristic estimates the VRAM, in bytes, of serving the weights at
// path: their size × 1.2 + HeuristicOverhead, or 0 if there are none.
//
// The weights are loaded about as they are stored (GGUF and safetensors
// are laid out for the device), so the file size is the bulk. The 20 % is
// the KV cache and compute buffers of a default context (llama-server's
// 4096-token KV cache for an 8B model is ~0.5 GiB against ~4.9 GB of Q4
// weights, ~10 %; compute buffers add a few per cent more); the overhead is
// the CUDA context. It is a last resort, used only when neither the config
// nor the backend gives a figure, and is replaced by the measured usage
// once the model is loaded.
//
// path may be a file (one part of a split GGUF counts all its parts) or a
// directory (the weight files directly in it: *.gguf, *.safetensors, *.bin,
// *.pt, *.pth).
func FileSizeHeuristic(path string) uint64 {
	size := weightsSize(path)
	if size == 0 {
		return 0
	}
	return size/5*6 + size%5*6/5 + HeuristicOverhead
}

func weightsSize(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if !st.IsDir() {
		if m := splitGGUF.FindStringSubmatch(filepath.Base(path)); m != nil {
			parts, _ := filepath.Glob(filepath.Join(filepath.Dir(path), globEscape(m[1])+"-[0-9][0-9][0-9][0-9][0-9]-of-"+m[2]+".gguf"))
			var sum uint64
			for _, p := range parts {
				if pst, err := os.Stat(p); err == nil && pst.Mode().IsRegular() {
					sum += uint64(pst.Size())
				}
			}
			return sum
		}
		return uint64(st.Size())
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return 0
	}
	var sum uint64
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if !e.Type().IsRegular() || !slices.Contains(weightExts, ext) {
			continue
		}
		if info, err := e.Info(); err == nil {
			sum += uint64(info.Size())
		}
	}
	return sum
}

// globEscape quotes the glob metacharacters of a literal file name part.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
