#!/usr/bin/env python3
"""Per-kernel breakdown of decode steps from Nsight Compute's CSV (scripts/gpu-pending.sh:
`ncu --csv --metrics gpu__time_duration.sum ... skim bench ...`).

ncu profiles every kernel of every graph launch in launch order. A forward pass starts with the
embedding kernel, so the launches between two embed_kernel rows are one step; a run of steps
with the same kernel sequence (names) is one configuration (dense, mac, quest, quest+retro...).
For each configuration this prints the last step's kernels summed by name: count, total us, and
the step's total; with --all, every step's together (a prefill: the chunks of one prompt).

Usage: python3 bench/kernel_breakdown.py ncu.csv [--all] [--json out.json]
"""
import argparse
import csv
import json
import re
import sys


def short(name):
    """A kernel's name without templates, namespaces and arguments."""
    for anon in ("(anonymous namespace)", "<unnamed>", "unnamed>"):  # ncu writes it several ways
        name = name.replace(anon, "anon")
    depth, out = 0, ""
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out += ch
    out = re.sub(r"\(.*$", "", out)  # the arguments
    return out.split("::")[-1].strip().split(" ")[-1]


def read_kernels(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages are not quoted
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        us = value / 1e3 if unit.startswith("n") else value if unit.startswith("u") else value * 1e3
        rows.append((int(r["ID"]), short(r["Kernel Name"]), us))
    rows.sort()
    return [(name, us) for _, name, us in rows]


def steps_of(kernels):
    steps, cur = [], None
    for name, us in kernels:
        if name == "embed_kernel":
            cur = []
            steps.append(cur)
        if cur is not None:
            cur.append((name, us))
    return steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--json")
    ap.add_argument("--all", action="store_true", help="sum every step of a configuration, not its last")
    args = ap.parse_args()
    steps = steps_of(read_kernels(args.csv))
    configs = []  # (signature, the last step's kernels, or every step's with --all)
    for st in steps:
        sig = tuple(n for n, _ in st) if not args.all else tuple(sorted({n for n, _ in st}))
        if configs and configs[-1][0] == sig:
            configs[-1] = (sig, configs[-1][1] + st if args.all else st)
        else:
            configs.append((sig, st))
    out = []
    for i, (_, st) in enumerate(configs):
        total = sum(us for _, us in st)
        by = {}
        for n, us in st:
            c, t = by.get(n, (0, 0.0))
            by[n] = (c + 1, t + us)
        print(f"\n## configuration {i + 1}: {len(st)} kernels, {total:.1f} us")
        print("| kernel | count | us | share |\n|---|---|---|---|")
        for n, (c, t) in sorted(by.items(), key=lambda x: -x[1][1]):
            print(f"| {n} | {c} | {t:.1f} | {t / total:.1%} |")
        out.append({"kernels": len(st), "us": total, "by_kernel": {n: {"count": c, "us": t} for n, (c, t) in by.items()}})
    if args.json:
        json.dump(out, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
