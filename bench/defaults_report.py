#!/usr/bin/env python3
"""The defaults' table from bench/defaults.sh's JSON pieces.

Usage: defaults_report.py RESULTS_MD DIR [DIR ...]

Per policy at its defaults (each DIR holds one policy list's pieces: needle-<len>.json,
ppl-<ctx>.json): perplexity against dense and KV bytes read per step at each context,
retrieval (needle task, all kinds) at each length, and CPU decode tokens/s against dense at the
longest context. Written into RESULTS_MD between the defaults:begin / defaults:end markers.
"""
import glob
import json
import os
import sys

from md_block import write_block


def load(dirs):
    """policy -> {piece name -> policy entry}; dense per piece from the last dir that has the piece
    (every dir's dense ran the same windows and prompts, so its quality is the same; the last run's
    speed is the one shown: give the clean speed run last). Later dirs override a policy's piece."""
    table, dense = {}, {}
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.json"))):
            piece = os.path.basename(path)[:-5]
            policies = json.load(open(path))["policies"]
            dense[piece] = policies[0]
            for p in policies[1:]:
                p["dense_of_run"] = policies[0]  # speeds compare within one run (same load)
                table.setdefault(p["policy"], {})[piece] = p
    return table, dense


# Policy strings whose meaning changed with the defaults, as the table names them (the pieces
# keep the strings they ran with): ART's default became the group rule on 2026-11-26.
LABELS = {
    "art:order=group,stop=group,test=probe": "`art` (the group rule, the default since 2026-11-26)",
    "art": "`art:order=bound` (per head, the default until then)",
}
ORDER = ["art:order=group,stop=group,test=probe", "art"]  # the current default's row first


def needle(p):
    cells = [c for by_len in p.get("needle", {}).values() for c in by_len.values()]
    return sum(c["correct"] for c in cells), sum(c["total"] for c in cells)


def main(md, dirs):
    table, dense = load(dirs)
    ppl = sorted((k for k in dense if k.startswith("ppl-")), key=lambda k: int(k[4:]))
    ndl = sorted((k for k in dense if k.startswith("needle-")), key=lambda k: int(k[7:]))
    head = ["policy"] + [f"ppl {k[4:]} (KV read)" for k in ppl] + [f"needle {k[7:]}" for k in ndl]
    if ppl:
        head.append(f"tok/s {ppl[-1][4:]} vs dense")
    L = ["<!-- defaults:begin -->", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    row = ["dense"] + [f"{dense[k]['perplexity']['overall']:.3f} (1.000)" for k in ppl]
    row += ["{}/{}".format(*needle(dense[k])) for k in ndl]
    if ppl:
        row.append(f"{dense[ppl[-1]]['work']['decode_tokens_per_s']:.1f}")
    L.append("| " + " | ".join(row) + " |")
    names = list(table)
    for first, second in zip(ORDER, ORDER[1:]):  # keep the pair adjacent, the default first
        if first in names and second in names:
            names.remove(first)
            names.insert(names.index(second), first)
    for policy in names:
        pieces = table[policy]
        row = [LABELS.get(policy, f"`{policy}`")]
        for k in ppl:
            p = pieces.get(k)
            row.append("-" if p is None else
                       f"{100 * (p['perplexity']['overall'] / dense[k]['perplexity']['overall'] - 1):+.2f}%"
                       f" ({p['work']['kv_bytes_relative_to_dense']:.3f})")
        for k in ndl:
            row.append("-" if k not in pieces else "{}/{}".format(*needle(pieces[k])))
        if ppl:
            p = pieces.get(ppl[-1])
            row.append("-" if p is None else f"{p['work']['decode_tokens_per_s']:.1f}"
                       f" ({p['work']['decode_tokens_per_s'] / p['dense_of_run']['work']['decode_tokens_per_s']:.2f}x)")
        L.append("| " + " | ".join(row) + " |")
    L += ["", "<!-- defaults:end -->"]
    write_block(md, "defaults", L)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
