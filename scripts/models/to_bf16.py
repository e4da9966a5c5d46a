#!/usr/bin/env python3
"""Copies a Hugging Face model directory with its F32 safetensors tensors rounded to BF16
(round to nearest even, as skim's GPU upload rounds them: core/dtype.h f32_to_bf16), so that
the GPU holds the same weights from either file, in half the bytes. Other tensors and files
are copied as they are; manifest.json records what was done.

    python3 scripts/models/to_bf16.py SRC_DIR DST_DIR

Needs numpy only.
"""
import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    bits = x.view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def convert(src: Path, dst: Path) -> None:
    raw = src.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = memoryview(raw)[8 + n :]
    out_header, chunks, offset = {}, [], 0
    for name, info in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                             key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        blob = bytes(data[begin:end])
        dtype = info["dtype"]
        if dtype == "F32":
            blob = to_bf16_bits(np.frombuffer(blob, dtype=np.float32).copy()).tobytes()
            dtype = "BF16"
        out_header[name] = {"dtype": dtype, "shape": info["shape"], "data_offsets": [offset, offset + len(blob)]}
        chunks.append(blob)
        offset += len(blob)
    if "__metadata__" in header:
        out_header["__metadata__"] = header["__metadata__"]
    head = json.dumps(out_header, separators=(",", ":")).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for c in chunks:
            f.write(c)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix == ".safetensors":
            convert(f, dst / f.name)
        elif f.is_file():
            shutil.copy2(f, dst / f.name)
    manifest_path = dst / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest["weights_dtype"] = "bfloat16: the float32 weights rounded to nearest even (scripts/models/to_bf16.py)"
    manifest["bf16_of"] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in src.glob("*.safetensors")}
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
