#!/usr/bin/env python3
"""Joins `skim bench --json` (skim's decode attention and end-to-end decode steps) with
bench/attention/sdpa_bench.py's JSON (PyTorch SDPA, same machine, same run of
scripts/gpu-check.sh) into one markdown table with issue 5's targets checked.

Both sides are timed the same way here: the mean of one call inside a CUDA graph of 100+
back-to-back calls, the cache rotated among copies so each call reads HBM, not L2.

    python3 bench/gpu_report.py BENCH_E2E.json SDPA.json OUT.md
"""
import datetime
import json
import sys


def main():
    bench_path, sdpa_path, out_path = sys.argv[1:4]
    bench = json.load(open(bench_path))
    try:
        sdpa = json.load(open(sdpa_path))
    except (OSError, ValueError):
        sdpa = {"points": []}
    bw = bench["copy_GBps"] * 1e9
    L = []
    w = L.append
    w(f"# skim bench on {bench['device']} ({datetime.date.today().isoformat()})")
    w("")
    w(f"Copy bandwidth (cudaMemcpy D2D, read + write): {bench['copy_GBps']:.0f} GB/s. "
      f"PyTorch {sdpa.get('torch', '?')}. Times are the mean of one call in a CUDA graph of "
      "back-to-back calls (both sides), K/V rotated among copies so every call reads HBM.")
    w("")
    w("## Decode attention, Llama-3.1-8B layer (32 q / 8 KV heads, head_dim 128, bf16)")
    w("")
    w("| batch | context | MB moved | skim us | of copy bw | SDPA best us (backend) | SDPA / skim | targets |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in bench.get("attention", []):
        best = None
        for q in sdpa["points"]:
            if q["batch"] == p["batch"] and q["ctx"] == p["context"]:
                runs = [r for r in q["runs"] if r.get("graph_mean_us")]
                if runs:
                    best = min(runs, key=lambda r: r["graph_mean_us"])
        checks = []
        if p["context"] >= 32768:
            checks.append(f"frac>=0.85 {'ok' if p['fraction_of_copy_bw'] >= 0.85 else 'MISS'}")
        if p["batch"] == 1 and p["context"] == 8192:
            checks.append(f"<20us {'ok' if p['us'] < 20 else 'MISS'}")
        sd = "-"
        ratio = "-"
        if best:
            sd = f"{best['graph_mean_us']:.1f} ({best['name']})"
            ratio = f"{best['graph_mean_us'] / p['us']:.3f}"
            checks.append(f"<=SDPA {'ok' if p['us'] <= best['graph_mean_us'] else 'MISS'}")
        w(f"| {p['batch']} | {p['context']} | {p['bytes'] / 1e6:.1f} | {p['us']:.1f} | "
          f"{p['fraction_of_copy_bw']:.2f} | {sd} | {ratio} | {', '.join(checks)} |")
    w("")
    if bench.get("sparse_attention"):
        w("## gbsa: group page selection + decode attention over the kept pages (same shapes)")
        w("")
        w("| batch | context | keep | select us | select + attend us | dense us | speedup | MB read |")
        w("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for p in bench["sparse_attention"]:
            w(f"| {p['batch']} | {p['context']} | {p['keep']} | {p['select_us']:.1f} | {p['us']:.1f} | "
              f"{p['dense_us']:.1f} | {p['dense_us'] / p['us']:.2f}x | {p['bytes'] / 1e6:.1f} |")
        w("")
    w("## End-to-end greedy decode step (CUDA graph, token fed back on the device)")
    w("")
    w("Context K/V random (no prefill); floor = (weight bytes + KV bytes read) / copy bandwidth; gbsa rows")
    w("count the kept pages and the digests they score.")
    w("")
    w("| model | policy | batch | context | ms/token | tokens/s | weights MB | KV MB | floor ms | x floor | target |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in bench.get("end_to_end", []):
        target = "-"
        policy = p.get("policy", "dense")
        if "8B" in p["model"] and p["batch"] == 1 and p["context"] == 32768 and policy == "dense":
            target = f"<=1.25x {'ok' if p['ratio_to_floor'] <= 1.25 else 'MISS'}"
        w(f"| {p['model']} | {policy} | {p['batch']} | {p['context']} | {p['ms_per_token']:.3f} | "
          f"{p['batch'] * 1e3 / p['ms_per_token']:.0f} | {p['weight_bytes'] / 1e6:.0f} | {p['kv_bytes'] / 1e6:.0f} | "
          f"{p['floor_ms']:.3f} | {p['ratio_to_floor']:.2f} | {target} |")
        if p.get("rectify_f"):  # resa = this gbsa step + one rectification spread over f steps
            r = p["resa_ms_per_token"]
            w(f"| {p['model']} | resa (gbsa + rectify f={p['rectify_f']}: {p['rectify_ms']:.2f} ms per rectification) | "
              f"{p['batch']} | {p['context']} | {r:.3f} | {p['batch'] * 1e3 / r:.0f} | | | | | - |")
    open(out_path, "w").write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
