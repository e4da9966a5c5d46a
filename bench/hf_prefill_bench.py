#!/usr/bin/env python3
"""transformers + PyTorch SDPA prefill of a random-weight Llama-3.1-8B-shaped model: the
reference for `skim bench`'s 8B-shape prefill tokens/s (issue 20).

One forward of the whole prompt (bf16, KV cache on, the last token's logits only), after a
warm-up forward of 2048 tokens; the median of --repeats timed forwards per context.

    python3 bench/hf_prefill_bench.py --contexts 8192,32768 --out hf-prefill.json
"""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM


def llama31_8b():
    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                       rope_theta=500000.0, rms_norm_eps=1e-5, attn_implementation="sdpa")


def forward_s(model, ids):
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        model(input_ids=ids, use_cache=True, logits_to_keep=1)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="8192,32768")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="hf-prefill.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 on the device: no fp32 copy
    with torch.device("cuda"):
        model = LlamaForCausalLM(llama31_8b()).eval()
    vocab = model.config.vocab_size
    forward_s(model, torch.randint(0, vocab, (1, 2048), device="cuda"))
    rows = []
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print("| context | s | tokens/s |\n|---|---|---|")
    for n in (int(x) for x in args.contexts.split(",")):
        ids = torch.randint(0, vocab, (1, n), device="cuda")
        s = statistics.median(forward_s(model, ids) for _ in range(args.repeats))
        print(f"| {n} | {s:.3f} | {n / s:.0f} |", flush=True)
        rows.append({"context": n, "seconds": s, "tokens_per_s": n / s})
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "transformers": transformers.__version__,
                   "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
