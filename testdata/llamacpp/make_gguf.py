"""Write tiny, valid llama-architecture GGUF models with random weights.

Usage: python3 make_gguf.py [--out DIR] [--seed N]     (DIR: testdata/gguf)

llama.cpp loads these for real: it tokenizes any text with their small
SentencePiece-style vocabulary (byte-fallback tokens make every input
tokenizable), runs the transformer and samples; the text is gibberish. Three
sizes are written, with a manifest.json the Go tests check estimates against:

  tiny.gguf    2 layers x  64 embd, all F32                      ~0.8 MB
  small.gguf   3 layers x 128 embd, F16 weights, Q8_0 embeddings,
               grouped-query attention                           ~1.5 MB
  large.gguf   4 layers x 256 embd, F32, tied output embeddings,
               grouped-query attention                           ~39 MB

and two more of tiny's shape whose headers say what the model can do, as
Ollama's API shows it: chat.gguf has a chat template that takes tools and
a reasoning block, and fill-in-the-middle tokens; embed.gguf has a pooling
type (an embedding model). mmproj.gguf is the header and two tensors of a
vision projector (llama-server's --mmproj), for the estimate and the
capabilities only: no llama-server runs it.

Output is deterministic for a seed. Files are written beside their final
name and renamed into place, so a server reading an older copy is not
disturbed, and nothing is rewritten when the manifest says the files were
made by this script, this gguf version and this seed.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

MODELS = [
    # name, layers, embd, heads, kv heads, ffn, context, linear type, embedding type, tied output
    dict(name="tiny", n_layer=2, n_embd=64, n_head=4, n_head_kv=4, n_ff=192,
         ctx=256, linear=Q.F32, embd=Q.F32, tied=False),
    dict(name="small", n_layer=3, n_embd=128, n_head=4, n_head_kv=2, n_ff=384,
         ctx=512, linear=Q.F16, embd=Q.Q8_0, tied=False),
    dict(name="large", n_layer=4, n_embd=256, n_head=8, n_head_kv=4, n_ff=2816,
         ctx=1024, linear=Q.F32, embd=Q.F32, tied=True),
    dict(name="chat", n_layer=2, n_embd=64, n_head=4, n_head_kv=4, n_ff=192,
         ctx=256, linear=Q.F32, embd=Q.F32, tied=False, tools=True, thinking=True, fim=True),
    dict(name="embed", n_layer=2, n_embd=64, n_head=4, n_head_kv=4, n_ff=192,
         ctx=256, linear=Q.F32, embd=Q.F32, tied=False, pooling=gguf.PoolingType.MEAN),
]

# chat.gguf's chat template (Jinja, as llama-server renders it): a tools
# block when the request has tools, and the reasoning of earlier turns in
# a <think> block.
CHAT_TEMPLATE = """{%- if tools %}<|tools|>{{ tools | tojson }}
{% endif -%}
{%- for m in messages %}<|{{ m.role }}|>
{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}
{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}"""

# Pieces of English, so that common text tokenizes into words rather than
# bytes; the rest falls back to the byte tokens.
WORDS = """the of and to in is you that it he was for on are as with his they at be
this have from or one had by word but not what all were we when your can said there
use an each which she do how their if will up other about out many then them these so
some her would make like him into time has look two more write go see number no way
could people my than first water been call who oil its now find long down day did get
come made may part hello world model token stream chat count once upon story test
load swap fast slow small large tiny quick brown fox jumps over lazy dog yes ok please
""".split()

SPACE = "\u2581"  # SentencePiece's word-boundary marker


def vocabulary():
    """Tokens, scores and types of a SentencePiece-style ("llama") vocab."""
    tokens, scores, types = [], [], []

    def add(text, score, ttype):
        tokens.append(text)
        scores.append(score)
        types.append(ttype)

    add("<unk>", 0.0, gguf.TokenType.UNKNOWN)
    add("<s>", 0.0, gguf.TokenType.CONTROL)
    add("</s>", 0.0, gguf.TokenType.CONTROL)
    for b in range(256):
        add(f"<0x{b:02X}>", 0.0, gguf.TokenType.BYTE)
    pieces = [SPACE] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    pieces += list("0123456789.,!?'-:;")
    pieces += [SPACE + chr(c) for c in range(ord("a"), ord("z") + 1)]
    seen = set(pieces)
    for w in WORDS:
        for p in (SPACE + w, w):
            if p not in seen:
                seen.add(p)
                pieces.append(p)
    # Longer pieces score higher: the tokenizer merges toward whole words.
    for p in pieces:
        add(p, float(len(p)) - 100.0, gguf.TokenType.NORMAL)
    return tokens, scores, types


def write_model(path, m, rng, tokens, scores, types):
    n_vocab, n_embd, head_dim = len(tokens), m["n_embd"], m["n_embd"] // m["n_head"]
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"loadout-test-{m['name']}")
    w.add_context_length(m["ctx"])
    w.add_embedding_length(n_embd)
    w.add_block_count(m["n_layer"])
    w.add_feed_forward_length(m["n_ff"])
    w.add_head_count(m["n_head"])
    w.add_head_count_kv(m["n_head_kv"])
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if m["linear"] == Q.F32 else gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    if m.get("tools") or m.get("thinking"):
        w.add_chat_template(CHAT_TEMPLATE)
    if m.get("fim"):  # any three tokens: only the header is read for them
        w.add_uint32(gguf.Keys.Tokenizer.FIM_PRE_ID, 3)
        w.add_uint32(gguf.Keys.Tokenizer.FIM_SUF_ID, 4)
        w.add_uint32(gguf.Keys.Tokenizer.FIM_MID_ID, 5)
    if m.get("pooling") is not None:
        w.add_pooling_type(m["pooling"])

    nbytes = {}

    def tensor(name, shape, qtype, std=None, fill=None):
        if fill is not None:
            data = np.full(shape, fill, dtype=np.float32)
        else:
            data = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        if qtype in (Q.F32, Q.F16):
            data = gguf.quants.quantize(data, qtype)
            w.add_tensor(name, data)
        else:
            data = gguf.quants.quantize(data, qtype)
            w.add_tensor(name, data, raw_dtype=qtype)
        nbytes[name] = int(data.nbytes)

    # numpy shapes are (rows, columns): GGUF stores them reversed, so
    # token_embd (n_vocab, n_embd) is llama.cpp's {n_embd, n_vocab}.
    if m["tied"]:
        # The output reuses the embeddings: the same logit spread as below.
        embd = rng.standard_normal((n_vocab, n_embd), dtype=np.float32) * np.float32(3.0 / np.sqrt(n_embd))
        embd[: 3 + 256] = 0.0
        data = gguf.quants.quantize(embd, m["embd"])
        w.add_tensor("token_embd.weight", data, raw_dtype=None if m["embd"] in (Q.F32, Q.F16) else m["embd"])
        nbytes["token_embd.weight"] = int(data.nbytes)
    else:
        tensor("token_embd.weight", (n_vocab, n_embd), m["embd"], std=1.0)
    for i in range(m["n_layer"]):
        p, s = f"blk.{i}.", 1.0 / np.sqrt(n_embd)
        tensor(p + "attn_norm.weight", (n_embd,), Q.F32, fill=1.0)
        tensor(p + "attn_q.weight", (m["n_head"] * head_dim, n_embd), m["linear"], std=s)
        tensor(p + "attn_k.weight", (m["n_head_kv"] * head_dim, n_embd), m["linear"], std=s)
        tensor(p + "attn_v.weight", (m["n_head_kv"] * head_dim, n_embd), m["linear"], std=s)
        tensor(p + "attn_output.weight", (n_embd, m["n_head"] * head_dim), m["linear"], std=s)
        tensor(p + "ffn_norm.weight", (n_embd,), Q.F32, fill=1.0)
        tensor(p + "ffn_gate.weight", (m["n_ff"], n_embd), m["linear"], std=s)
        tensor(p + "ffn_up.weight", (m["n_ff"], n_embd), m["linear"], std=s)
        tensor(p + "ffn_down.weight", (n_embd, m["n_ff"]), m["linear"], std=1.0 / np.sqrt(m["n_ff"]))
    tensor("output_norm.weight", (n_embd,), Q.F32, fill=1.0)
    if not m["tied"]:
        # Logits with a spread of about 3 over the word pieces; the control
        # and byte tokens get none, so generation rarely ends early or
        # streams broken UTF-8.
        out = rng.standard_normal((n_vocab, n_embd), dtype=np.float32) * np.float32(3.0 / np.sqrt(n_embd))
        out[: 3 + 256] = 0.0
        data = gguf.quants.quantize(out, m["linear"])
        w.add_tensor("output.weight", data)
        nbytes["output.weight"] = int(data.nbytes)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return nbytes


def write_projector(path, rng):
    """A vision projector's header (architecture clip) and two tensors."""
    w = gguf.GGUFWriter(path, "clip")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "mlp")
    nbytes = 0
    for name, shape in (("mm.0.weight", (64, 96)), ("mm.0.bias", (64,))):
        data = rng.standard_normal(shape, dtype=np.float32)
        w.add_tensor(name, data)
        nbytes += int(data.nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return nbytes


def fingerprint(seed):
    with open(__file__, "rb") as f:
        src = f.read()
    h = hashlib.sha256(src)
    h.update(f"seed={seed} gguf={getattr(gguf, '__version__', '?')} numpy={np.__version__}".encode())
    return h.hexdigest()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "gguf"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--force", action="store_true", help="rewrite even if up to date")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    fp = fingerprint(args.seed)
    if not args.force:
        try:
            with open(manifest_path) as f:
                old = json.load(f)
            if old.get("fingerprint") == fp and all(
                    os.path.exists(os.path.join(args.out, m["file"])) for m in old["models"] + old["projectors"]):
                print(f"up to date: {args.out}")
                return
        except (OSError, ValueError, KeyError):
            pass

    tokens, scores, types = vocabulary()
    manifest = {"fingerprint": fp, "seed": args.seed, "models": []}
    for i, m in enumerate(MODELS):
        rng = np.random.default_rng([args.seed, i])
        final = os.path.join(args.out, m["name"] + ".gguf")
        tmp = f"{final}.tmp-{os.getpid()}"
        try:
            nbytes = write_model(tmp, m, rng, tokens, scores, types)
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        manifest["models"].append({
            "name": m["name"], "file": m["name"] + ".gguf",
            "n_layer": m["n_layer"], "n_embd": m["n_embd"], "n_head": m["n_head"],
            "n_head_kv": m["n_head_kv"], "head_dim": m["n_embd"] // m["n_head"],
            "n_ff": m["n_ff"], "n_vocab": len(tokens), "context_length": m["ctx"],
            "tied_output": m["tied"], "file_size": os.path.getsize(final),
            "file_type": "F32" if m["linear"] == Q.F32 else "F16",
            "tensor_bytes": nbytes,
            "tools": bool(m.get("tools")), "thinking": bool(m.get("thinking")),
            "fim": bool(m.get("fim")), "embedding": m.get("pooling") is not None,
        })
        print(f"wrote {final} ({os.path.getsize(final) / 1e6:.1f} MB)")
    final = os.path.join(args.out, "mmproj.gguf")
    tmp = f"{final}.tmp-{os.getpid()}"
    try:
        nbytes = write_projector(tmp, np.random.default_rng([args.seed, len(MODELS)]))
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    manifest["projectors"] = [{"file": "mmproj.gguf", "tensor_bytes": nbytes, "vision": True}]
    tmp = f"{manifest_path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    os.replace(tmp, manifest_path)


if __name__ == "__main__":
    sys.exit(main())
