#!/usr/bin/env python3
"""The loops of one kernel's SASS, from its static code (no GPU needed): every backward branch
is a loop from its target to the branch, printed (after a row for the whole kernel) with its
instructions and the ones that cost (MMAs, global loads and stores, shared-memory traffic, shuffles, fences, divisions). Counting
a loop's body before and after a change tells whether the change took instructions out of the
path every page or block runs (session 34 took two divisions and an L1 invalidation out of ART's
page loop this way; bench/results/2026-11-29-s34-h200-art-loop/).

Input: scripts/sass-local.sh's per-kernel file ("ADDRESS INSTRUCTION" a line, hex addresses).
Usage: python3 bench/sass_loops.py /tmp/sass-KERNEL.txt [--min 20]
"""
import argparse
import re

# What to count in a loop's body: a label and a regex on the instruction text.
KINDS = [("MMA", r"\b(HMMA|HGMMA)"), ("LDG", r"\bLDG"), ("LDGSTS", r"\bLDGSTS"), ("STG", r"\bSTG"),
         ("LDS", r"\bLDS"), ("STS", r"\bSTS"), ("SHFL", r"\bSHFL"), ("atomic", r"\b(ATOM|RED)G?\b"),
         ("fence", r"\bMEMBAR"), ("L1 inval.", r"\bCCTL"), ("division", r"\bI2F\.RP"),
         ("barrier", r"\bBAR\.(SYNC|ARV)")]


def load(path):
    """(address, text) of each instruction, in address order."""
    out = []
    with open(path) as f:
        for line in f:
            parts = line.split(None, 1)
            if len(parts) == 2 and re.fullmatch(r"[0-9a-f]+", parts[0]):
                out.append((int(parts[0], 16), parts[1].strip()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass")
    ap.add_argument("--min", type=int, default=20, help="leave out loops of fewer instructions")
    args = ap.parse_args()
    code = load(args.sass)
    index = {addr: i for i, (addr, _) in enumerate(code)}
    # Past the last unconditional EXIT lie out-of-line paths (divergent shuffles' and syncs' slow
    # paths) whose branches return into the body: not loops.
    body_end = max((i for i, (_, t) in enumerate(code) if t == "EXIT"), default=len(code) - 1)
    loops = []
    for i, (addr, text) in enumerate(code[:body_end]):
        m = re.search(r"\bBRA(?:\.\w+)*\s+(?:\w+,\s*)?0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) <= addr and int(m.group(1), 16) in index:
            start = index[int(m.group(1), 16)]
            if i - start + 1 >= args.min:
                loops.append((start, i))
    print(f"{len(code)} instructions ({body_end + 1} to the last EXIT); {len(loops)} loops of {args.min} or more")
    print("| from | to | instructions | " + " | ".join(k for k, _ in KINDS) + " |")
    print("|---|---|---|" + "---|" * len(KINDS))

    def row(first, last, start, end):
        body = [t for _, t in code[start:end + 1]]
        counts = [sum(1 for t in body if re.search(rx, t)) for _, rx in KINDS]
        print(f"| {first} | {last} | {len(body)} | " + " | ".join(map(str, counts)) + " |")

    row("whole", "kernel", 0, len(code) - 1)
    for start, end in sorted(loops, key=lambda l: (l[0], -l[1])):
        row(f"{code[start][0]:#x}", f"{code[end][0]:#x}", start, end)


if __name__ == "__main__":
    main()
