#!/usr/bin/env python3
"""Seed corpora for the fuzzers: small valid safetensors files and config.json variants (every
family and all three RoPE spellings); chat templates (the fixtures of
tests/fixtures/chat_templates, alone and followed by a NUL and a conversation's messages).
Usage: make_seeds.py OUT_DIR"""
import json
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def safetensors(tensors, metadata=True):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = {"format": "pt"}
    sizes = {"F32": 4, "F16": 2, "BF16": 2}
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        blob = bytes((i * 7) & 0xFF for i in range(n * sizes[dtype]))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main(out):
    st, cfg = Path(out) / "safetensors", Path(out) / "config"
    st.mkdir(parents=True, exist_ok=True)
    cfg.mkdir(parents=True, exist_ok=True)
    (st / "small").write_bytes(safetensors([
        ("model.embed_tokens.weight", "BF16", [4, 2]),
        ("model.norm.weight", "F32", [2]),
        ("lm_head.weight", "F16", [4, 2])]))
    (st / "scalar_empty").write_bytes(safetensors([("s", "F32", []), ("e", "BF16", [0, 3])], False))
    (st / "empty").write_bytes(safetensors([], False))

    base = json.loads((ROOT / "models/demo-code-28m/config.json").read_text())
    (cfg / "demo").write_text(json.dumps(base))
    for fixture in sorted((ROOT / "tests/fixtures/models").glob("*/config.json")):
        (cfg / fixture.parent.name).write_text(fixture.read_text())
    llama31 = dict(base, rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192})
    del llama31["rope_parameters"]
    (cfg / "llama31_rope_scaling").write_text(json.dumps(llama31))
    (cfg / "mistral_window").write_text(json.dumps(dict(base, model_type="mistral", sliding_window=4096, head_dim=None)))
    (cfg / "qwen2_window").write_text(json.dumps(dict(base, model_type="qwen2", use_sliding_window=True,
                                                      sliding_window=64, max_window_layers=0,
                                                      eos_token_id=[1, 2])))

    chat_seeds(Path(out) / "chat_template")


def chat_seeds(out):
    out.mkdir(parents=True, exist_ok=True)
    fixtures = ROOT / "tests/fixtures/chat_templates"
    conversations = json.loads((fixtures / "cases.json").read_text())["conversations"]
    for t in sorted((fixtures / "templates").glob("*.jinja")):
        text = t.read_bytes()
        (out / t.stem).write_bytes(text)
        for c in conversations[::3]:
            (out / f"{t.stem}-{c['name']}").write_bytes(text + b"\0" + json.dumps(c["messages"]).encode())


if __name__ == "__main__":
    main(sys.argv[1])
