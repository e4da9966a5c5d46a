#!/usr/bin/env python3
"""Turns a Llama-architecture GGUF file into a Hugging Face model directory skim and
transformers both load.

    python3 scripts/models/gguf_to_hf.py FILE.gguf OUT_DIR

Writes OUT_DIR/{config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, chat_template.jinja, manifest.json}. Needs only numpy, gguf and
safetensors (no torch). Written for SmolLM2-135M-Instruct (scripts/models/smollm2.sh) and
refuses what it was not written for (other architectures, tokenizers or tensor names) rather
than guessing.

Decisions, and why:

- Weights are stored as float32. GGUF's Q4_1 and Q8_0 blocks dequantise to d*q (+ m) with
  fp16 scales, values that bf16 (8 mantissa bits) cannot hold and fp16 often cannot either;
  float32 holds gguf's own fp32 result exactly, so skim and transformers read the very same
  numbers (the golden tests then measure the engines, not a second rounding).
- llama.cpp's converter reorders the rows of q_proj and k_proj inside every head (it turns
  the two halves that HF's rotate_half pairs up into interleaved pairs, the layout of GGML's
  RoPE). We undo that exactly: a pure row permutation, no arithmetic.
- The tokenizer is byte-level BPE (tokenizer.ggml.model "gpt2"); its vocabulary and merges are
  already spelled in GPT-2's byte alphabet, so they are copied as they are. The pre-tokenizer
  is chosen by tokenizer.ggml.pre; "smollm" is the one of SmolLM/SmolLM2's tokenizer.json:
  every digit alone, then GPT-2's split (llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM says the
  same). Tokens marked CONTROL become special added tokens, as in the original.
"""
import hashlib
import json
import os
import sys

import numpy as np
import gguf
from safetensors.numpy import save_file

GGUF_CONTROL = 3  # llama.cpp token type of special (control) tokens; 1 is a normal token

# GGUF tensor name (with the layer number as {i}) -> Hugging Face Llama name.
TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}

# tokenizer.ggml.pre -> the pre-tokenizer of the original tokenizer.json. Only what was checked.
GPT2_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                   "use_regex": True}
PRE_TOKENIZERS = {
    "smollm": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, GPT2_BYTE_LEVEL]},
}


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def hf_name(gguf_name):
    parts = gguf_name.split(".")
    if parts[0] == "blk":
        key = ".".join(["blk", "{i}"] + parts[2:])
        if key in TENSOR_NAMES:
            return TENSOR_NAMES[key].format(i=int(parts[1]))
    elif gguf_name in TENSOR_NAMES:
        return TENSOR_NAMES[gguf_name]
    sys.exit(f"gguf_to_hf: no Hugging Face name for tensor {gguf_name!r}")


def unpermute_rope_rows(w, n_heads):
    """Inverse of llama.cpp's permute: per head, rows (pair, half) -> (half, pair)."""
    rows, cols = w.shape
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def config_from(reader):
    arch = field(reader, "general.architecture")
    if arch != "llama":
        sys.exit(f"gguf_to_hf: architecture {arch!r}, only 'llama' is handled")
    k = lambda name: field(reader, f"llama.{name}")
    n_heads, n_kv = int(k("attention.head_count")), int(k("attention.head_count_kv"))
    hidden = int(k("embedding_length"))
    names = {t.name for t in reader.tensors}
    special = {n: field(reader, f"tokenizer.ggml.{n}_token_id")
               for n in ("bos", "eos", "padding", "unknown")}
    # GGUF keeps these as float32; write the shortest decimal that rounds to it (1e-05, not
    # 9.999999747378752e-06), as the original config.json has them.
    as_f32 = lambda v: float(str(np.float32(v)))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(k("feed_forward_length")),
        "num_hidden_layers": int(k("block_count")),
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv,
        "head_dim": hidden // n_heads,
        "hidden_act": "silu",
        "max_position_embeddings": int(k("context_length")),
        "rms_norm_eps": as_f32(k("attention.layer_norm_rms_epsilon")),
        "rope_theta": as_f32(k("rope.freq_base")),
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in names,
        "vocab_size": len(field(reader, "tokenizer.ggml.tokens")),
        "bos_token_id": special["bos"],
        "eos_token_id": special["eos"],
        "pad_token_id": special["padding"],
        "torch_dtype": "float32",
    }


def weights_from(reader, cfg):
    if cfg["head_dim"] * cfg["num_attention_heads"] != cfg["hidden_size"] or \
            int(field(reader, "llama.rope.dimension_count", cfg["head_dim"])) != cfg["head_dim"]:
        sys.exit("gguf_to_hf: partial RoPE or head_dim != hidden/heads is not handled")
    out = {}
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type)  # numpy shape = HF shape, fp32
        w = np.ascontiguousarray(w, dtype=np.float32)
        if t.name.endswith("attn_q.weight"):
            w = unpermute_rope_rows(w, cfg["num_attention_heads"])
        elif t.name.endswith("attn_k.weight"):
            w = unpermute_rope_rows(w, cfg["num_key_value_heads"])
        out[hf_name(t.name)] = np.ascontiguousarray(w)
    return out


def tokenizer_from(reader):
    """(tokenizer.json, tokenizer_config.json, chat template) as the original repository has them."""
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        sys.exit("gguf_to_hf: only byte-level BPE (tokenizer.ggml.model 'gpt2') is handled")
    pre = field(reader, "tokenizer.ggml.pre")
    if pre not in PRE_TOKENIZERS:
        sys.exit(f"gguf_to_hf: pre-tokenizer {pre!r} unknown here; add it to PRE_TOKENIZERS")
    if field(reader, "tokenizer.ggml.add_bos_token", False) or \
            field(reader, "tokenizer.ggml.add_eos_token", False):
        sys.exit("gguf_to_hf: a tokenizer that adds BOS/EOS needs a post-processor; not handled")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = [m.split(" ") for m in field(reader, "tokenizer.ggml.merges")]
    assert all(len(m) == 2 for m in merges), "a merge is not two symbols"
    control = [i for i, t in enumerate(types) if t == GGUF_CONTROL]
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i in control]
    tok_json = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        # ByteLevel post-processing only trims offsets: no BOS/EOS is added to an encoding
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True,
                           "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    assert len(tok_json["model"]["vocab"]) == len(tokens), "duplicate tokens"
    name = lambda key: tokens[field(reader, f"tokenizer.ggml.{key}_token_id")]
    template = field(reader, "tokenizer.chat_template")
    tok_config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"}
                                 for a in added},
        "bos_token": name("bos"),
        "eos_token": name("eos"),
        "pad_token": name("padding"),
        "unk_token": name("unknown"),
        "additional_special_tokens": [name("bos"), name("eos")],
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(field(reader, "llama.context_length")),
        # The original says GPT2Tokenizer; transformers 5's GPT2Tokenizer rebuilds the pipeline
        # with a plain ByteLevel pre-tokenizer, dropping the digit split of tokenizer.json
        # (non-ASCII numerals such as "٣٤٥" then tokenize differently from transformers 4 and
        # the tokenizers library). This class loads tokenizer.json as it is, in both versions.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": template,
    }
    return tok_json, tok_config, template


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    src, out = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    cfg = config_from(reader)
    weights = weights_from(reader, cfg)
    tok_json, tok_config, template = tokenizer_from(reader)
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, "config.json"), cfg)
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
                "pad_token_id": cfg["pad_token_id"]})
    # no metadata: the file's bytes depend only on the tensors (a rerun gives the same hash)
    save_file(weights, os.path.join(out, "model.safetensors"))
    write_json(os.path.join(out, "tokenizer.json"), tok_json)
    write_json(os.path.join(out, "tokenizer_config.json"), tok_config)
    with open(os.path.join(out, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(template)
    files = sorted(n for n in os.listdir(out) if n != "manifest.json")
    manifest = {
        "source": {"file": os.path.basename(src), "sha256": sha256(src),
                   "name": field(reader, "general.name"),
                   "tensor_types": sorted({t.tensor_type.name for t in reader.tensors})},
        "weights_dtype": "float32 (the dequantised values, exact)",
        "n_parameters": int(sum(w.size for w in weights.values())),
        "files": {n: {"bytes": os.path.getsize(os.path.join(out, n)),
                      "sha256": sha256(os.path.join(out, n))} for n in files},
    }
    write_json(os.path.join(out, "manifest.json"), manifest)
    for n, f in manifest["files"].items():
        print(f"  {f['sha256']}  {f['bytes']:>11}  {n}")
    print(f"  {manifest['n_parameters']} parameters from {manifest['source']['tensor_types']}")


if __name__ == "__main__":
    main()
