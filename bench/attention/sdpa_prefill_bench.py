#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention on a whole causal prompt: the shape `skim bench
--prefill-attention` times skim's paged prefill kernel on (issue 20's targets).

q [1, 32, L, 128], k/v [1, 8, L, 128], bf16, is_causal=True, contiguous K/V. Each backend forced
through torch.nn.attention.sdpa_kernel (cuDNN and flash take GQA by enable_gqa; the others by
repeated K/V heads, which they would read in a model too), timed with CUDA events around
back-to-back calls after a warm-up: the median of `iters` calls. FLOPs counted as skim counts
them: 4 x head_dim x heads x the (query, key) pairs the causal mask keeps, L (L + 1) / 2.

    python3 sdpa_prefill_bench.py --contexts 8192,32768,131072 --out sdpa-prefill.json
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HEADS, KV_HEADS, D = 32, 8, 128
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def time_ms(fn, iters):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="8192,32768,131072")
    ap.add_argument("--out", default="sdpa-prefill.json")
    args = ap.parse_args()
    rows = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print("| backend | context | ms | TFLOP/s |\n|---|---|---|---|")
    for L in (int(x) for x in args.contexts.split(",")):
        g = torch.Generator(device="cuda").manual_seed(L)
        q = torch.randn(1, HEADS, L, D, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(1, KV_HEADS, L, D, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(1, KV_HEADS, L, D, device="cuda", dtype=torch.bfloat16, generator=g)
        flops = 4.0 * D * HEADS * L * (L + 1) / 2
        iters = max(3, min(50, int(2e14 / flops)))
        for name, backend in BACKENDS.items():
            gqa = name in ("cudnn", "flash")
            kk = k if gqa else k.repeat_interleave(HEADS // KV_HEADS, dim=1)
            vv = v if gqa else v.repeat_interleave(HEADS // KV_HEADS, dim=1)

            def call():
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)
            try:
                ms = time_ms(call, iters)
            except Exception as e:  # a backend that refuses the shape
                print(f"| {name} | {L} | {str(e).splitlines()[0][:60]} | |")
                continue
            finally:
                del kk, vv
            print(f"| {name} | {L} | {ms:.3f} | {flops / ms / 1e9:.1f} |", flush=True)
            rows.append({"backend": name, "context": L, "ms": ms, "flops": flops, "gqa": gqa})
        del q, k, v
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
