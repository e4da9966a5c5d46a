#!/usr/bin/env python3
"""Where one kernel's time goes, from Nsight Compute's per-instruction warp-state samples
(scripts/gpu-pending.sh's PARTS=sass: `ncu --set full --import-source yes` on one launch, then
`ncu -i REPORT --page source --csv --print-source sass > sass.csv`).

A CTA-wide kernel runs as a chain of phases between barriers; where every warp of a CTA lives
from start to end, a phase's share of the samples is its share of the time. This prints the
stall reasons over the whole kernel, then the kernel cut into phases at its executed block-wide
barriers (BAR.SYNC; a named barrier 'bar.sync 1, n' cuts too), each phase with its share, its
executed instructions and its leading stall reasons, then the instructions with the most samples.
The phases are in address order, which for straight code is time order; a loop's body is one
phase per barrier inside it, its passes summed.

Usage: python3 bench/sass_phases.py sass.csv [--top 20] [--min-share 1.0]
Made for session 33's select kernels (bench/results/2026-11-28-s33-h200-select-latency/), where
it showed the by-score sort at 43% of gbsa's select and the radix count bound by instruction issue.
"""
import argparse
import csv
import sys


def load(path):
    """The kernel's name, the column names and the instruction rows of a source-page CSV."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if start is None:
        sys.exit(f"{path}: no 'Address' header row: not an ncu --page source --csv export")
    kernel = rows[0][1] if rows[0] and rows[0][0] == "Kernel Name" and len(rows[0]) > 1 else "?"
    return kernel, rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]


def number(cell):
    try:
        return float(cell) if cell else 0.0
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20, help="instructions listed by samples")
    ap.add_argument("--min-share", type=float, default=1.0, help="phases below this %% of samples are folded")
    args = ap.parse_args()
    kernel, header, rows = load(args.csv)
    col = {h: i for i, h in enumerate(header)}
    samples_col = col.get("Warp Stall Sampling (All Samples)")
    executed_col = col.get("Instructions Executed")
    if samples_col is None or executed_col is None:
        sys.exit(f"{args.csv}: no sampling columns (profile with --set full)")
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples = [number(r[samples_col]) for r in rows]
    total = sum(samples) or 1.0

    def reasons(rs, n=3):
        sums = {h: sum(number(r[col[h]]) for r in rs) for h in stalls}
        top = sorted(((v, h[len("stall_"):]) for h, v in sums.items() if v > 0), reverse=True)[:n]
        return ", ".join(f"{h} {100 * v / total:.0f}%" for v, h in top)

    print(f"kernel: {kernel}")
    print(f"{len(rows)} instructions, {total:.0f} samples; stalls: {reasons(rows, 8)}")
    def ops(phase):
        """The phase's executed memory, shuffle and atomic instructions by opcode, as 'LDG x4'."""
        count = {}
        for r in phase:
            if number(r[executed_col]) == 0:
                continue
            op = r[col["Source"]].split()
            op = op[1] if op and op[0].startswith("@") and len(op) > 1 else (op[0] if op else "")
            op = op.split(".")[0]
            if op in ("LDG", "STG", "LDS", "STS", "ATOMS", "ATOMG", "RED", "SHFL", "LDGSTS", "VOTE", "MATCH"):
                count[op] = count.get(op, 0) + 1
        return " ".join(f"{k} x{v}" for k, v in sorted(count.items(), key=lambda kv: -kv[1]))

    # A warp waiting at a barrier is sampled at the instruction after it: a phase ends there.
    print("\n| phase (instructions) | samples % | executed (warp instr.) | its loads, stores, shuffles | leading stalls |")
    print("|---|---|---|---|---|")
    start, folded = 0, 0.0
    for i, r in enumerate(rows):
        src = r[col["Source"]]
        after_barrier = i > 0 and number(rows[i - 1][executed_col]) > 0 and "BAR." in rows[i - 1][col["Source"]]
        if not (after_barrier or i == len(rows) - 1):
            continue
        phase = rows[start:i + 1]
        share = 100 * sum(samples[start:i + 1]) / total
        if share < args.min_share:
            folded += share
        else:
            executed = sum(number(p[executed_col]) for p in phase)
            print(f"| {start}-{i} | {share:.1f} | {executed:.0f} | {ops(phase)} | {reasons(phase)} |")
        start = i + 1
    if folded:
        print(f"| (phases under {args.min_share}%) | | {folded:.1f} | | |")
    print(f"\nthe {args.top} instructions with the most samples:")
    order = sorted(range(len(rows)), key=lambda i: -samples[i])[: args.top]
    for i in sorted(order):
        r = rows[i]
        print(f"  {i:6d} {100 * samples[i] / total:5.1f}%  exec {number(r[executed_col]):8.0f}  "
              f"{r[col['Source']].strip()[:60]:60s} {reasons([r], 2)}")


if __name__ == "__main__":
    main()
