#!/usr/bin/env python3
"""Table of scripts/gpu-attention-repeats.sh: per (batch, context), skim's decode attention
and the best PyTorch SDPA backend in each round (both the mean of one call in a CUDA graph),
their medians, and the rounds in which skim was not slower.

    python3 bench/attention_repeats_report.py DIR N
"""
import json
import statistics
import sys


def sdpa_best(points, batch, ctx):
    for p in points:
        if p["batch"] == batch and p["ctx"] == ctx:
            runs = [r for r in p["runs"] if r.get("graph_mean_us")]
            return min(runs, key=lambda r: r["graph_mean_us"])["graph_mean_us"] if runs else None
    return None


def main():
    d, n = sys.argv[1], int(sys.argv[2])
    skim = [json.load(open(f"{d}/skim-{i}.json")) for i in range(1, n + 1)]
    sdpa = [json.load(open(f"{d}/sdpa-{i}.json")) for i in range(1, n + 1)]
    print(f"# Decode attention, skim vs SDPA, {n} alternating rounds on {skim[0]['device']}")
    print()
    print("| batch | context | skim us (rounds) | SDPA best us (rounds) | skim median | SDPA median | skim/SDPA | rounds skim <= SDPA |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in skim[0]["attention"]:
        b, c = p["batch"], p["context"]
        ours = [next(q["us"] for q in s["attention"] if q["batch"] == b and q["context"] == c) for s in skim]
        theirs = [sdpa_best(s["points"], b, c) for s in sdpa]
        if None in theirs:
            continue
        mo, mt = statistics.median(ours), statistics.median(theirs)
        wins = sum(o <= t for o, t in zip(ours, theirs))
        print(f"| {b} | {c} | {' '.join(f'{x:.1f}' for x in ours)} | {' '.join(f'{x:.1f}' for x in theirs)} | "
              f"{mo:.1f} | {mt:.1f} | {mo / mt:.4f} | {wins}/{n} |")


if __name__ == "__main__":
    main()
