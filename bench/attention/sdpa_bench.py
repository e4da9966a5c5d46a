#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention on the shapes of decode_attention_bench.cu.

q [B, 32, 1, 128], k/v [B, 8, L, 128], bf16, enable_gqa=True (no repeated heads: SDPA reads
each KV head once, like skim's kernel), contiguous (not paged) K/V. Timed the same way as the
CUDA benchmark: CUDA events around each call, warm-up, median, and rotation among enough
copies of K/V that every call reads from HBM rather than L2. Reports the default dispatch and
each backend forced through torch.nn.attention.sdpa_kernel (where it accepts the inputs).

    python3 sdpa_bench.py --out sdpa.json [--quick]
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_calls(fn, warm, iters):
    for i in range(warm):
        fn(i)
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    # Keep the GPU busy while the host queues the calls (~40 us each at 2 GHz), so the events
    # time the GPU and not Python's launch rate.
    torch.cuda._sleep(int(40e-6 * 2e9) * iters)
    for i, (a, b) in enumerate(ev):
        a.record()
        fn(warm + i)
        b.record()
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in ev)
    at = lambda f: 1000.0 * ms[min(len(ms) - 1, int(f * len(ms)))]
    return {"median_us": at(0.5), "p10_us": at(0.1), "p90_us": at(0.9)}


def time_graph(fn, calls):
    """Mean time of one call in a CUDA graph of `calls` back-to-back calls (best of 5 replays):
    the way `skim bench` times skim's kernel, so that launch gaps count alike."""
    try:
        return _time_graph(fn, calls)
    except Exception as e:  # a backend that cannot be captured
        print(f"  (graph capture failed: {str(e).splitlines()[0][:80]})")
        torch.cuda.synchronize()
        return None


def _time_graph(fn, calls):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i)
    best = float("inf")
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b))
    del g
    return 1000.0 * best / calls


def copy_bw():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(90)
    b = torch.empty_like(a)
    s = time_calls(lambda i: b.copy_(a), 3, 20)
    del a, b
    return 2.0 * n / (s["median_us"] * 1e-6), s["median_us"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="sdpa.json")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(20261122)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    bw, bw_us = copy_bw()
    print(f"torch {torch.__version__}, {props.name}, copy {bw / 1e9:.0f} GB/s")
    H, HKV, D = 32, 8, 128
    contexts = [8192, 32768] if args.quick else [8192, 32768, 131072]
    backends = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("math", SDPBackend.MATH)]
    out = {"torch": torch.__version__, "device": props.name, "copy_bw_bytes_per_s": bw, "copy_us": bw_us,
           "layout": "q [B,32,1,128], k/v [B,8,L,128] bf16 contiguous, enable_gqa=True", "points": []}
    for B in (1, 8):
        for L in contexts:
            kv_bytes = B * L * HKV * D * 2 * 2
            copies = max(1, -(-4 * l2 // kv_bytes) + 1)
            qs = [torch.rand(B, H, 1, D, device="cuda", dtype=torch.bfloat16) * 2 - 1 for _ in range(copies)]
            ks = [torch.rand(B, HKV, L, D, device="cuda", dtype=torch.bfloat16) * 2 - 1 for _ in range(copies)]
            vs = [torch.rand(B, HKV, L, D, device="cuda", dtype=torch.bfloat16) * 2 - 1 for _ in range(copies)]
            nbytes = kv_bytes + B * H * D * 2 * 2  # K+V, q, o (bf16)
            iters = 60 if B * L >= (1 << 20) else 200
            point = {"batch": B, "ctx": L, "bytes": nbytes, "kv_copies": copies, "runs": []}
            # fp32 reference for an error column, where it fits comfortably.
            ref = (F.scaled_dot_product_attention(qs[0].float(), ks[0].float(), vs[0].float(), enable_gqa=True)
                   if kv_bytes <= (1 << 30) else None)
            for name, be in backends:
                if name == "math" and kv_bytes > (1 << 30):
                    continue  # materialises repeated K/V: slow and large, and never the fastest
                fn = lambda i: F.scaled_dot_product_attention(qs[i % copies], ks[i % copies], vs[i % copies],
                                                              enable_gqa=True)
                calls = max(copies, 100)
                try:
                    if be is None:
                        s = time_calls(fn, 10, iters)
                        err = (fn(0).float() - ref).abs().max().item() if ref is not None else None
                        s["graph_mean_us"] = time_graph(fn, calls)
                    else:
                        with sdpa_kernel(be):
                            s = time_calls(fn, 10, iters)
                            err = (fn(0).float() - ref).abs().max().item() if ref is not None else None
                            s["graph_mean_us"] = time_graph(fn, calls)
                except Exception as e:  # backend refuses these inputs
                    point["runs"].append({"name": name, "error": str(e).splitlines()[0][:200]})
                    print(f"B={B} L={L} {name}: not available ({str(e).splitlines()[0][:80]})")
                    continue
                s.update({"name": name, "bw_bytes_per_s": nbytes / (s["median_us"] * 1e-6),
                          "max_abs_err_vs_fp32": err})
                s["frac_copy"] = s["bw_bytes_per_s"] / bw
                point["runs"].append(s)
                print(f"B={B} L={L} {name:9s} {s['median_us']:9.2f} us  {s['frac_copy']:.3f} of copy;"
                      f" in a graph {s['graph_mean_us'] or float('nan'):9.2f} us")
            out["points"].append(point)
            del qs, ks, vs, ref
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
