#!/usr/bin/env python3
"""The frontier's tables and plots from bench/frontier.sh's JSON pieces.

Usage: frontier_report.py RESULTS_DIR RESULTS_MD

Writes, per model and context, a table (policy point, perplexity against dense, retrieval
accuracy, KV bytes read per decode step against dense) into RESULTS_MD between the
frontier:begin / frontier:end markers (the rest of the file is kept), and a PNG
RESULTS_DIR/<model-ctx>.png of quality against bytes with one line per policy family
(matplotlib, when installed; the tables are written either way).
"""
import glob
import json
import re
import os
import sys

from md_block import write_block


def retrieval(p):
    """(correct, total) over every kind/key count and length of the needle or passkey task."""
    task = p.get("needle") or p.get("passkey") or {}
    c = t = 0
    for by_len in task.values():
        for cell in by_len.values():
            c += cell["correct"]
            t += cell["total"]
    return c, t


def family_of(policy):
    """The line a policy point belongs to: its selector, or the stage that defines it, with the
    settings that make a different line (dense layers, ART's order for a dense base)."""
    parts = [x.split(":")[0] for x in policy.split("+")]
    family = parts[0]
    for stage in ("retro", "art", "mac"):
        if stage in parts:
            family = stage if parts == [stage] or stage != "art" else f"{parts[0]}+art"
            break
    m = re.search(r"dense_layers=(\d+)", policy)
    if m:
        family += f" (dense_layers={m.group(1)})"
    if family == "art":
        family += " (order=bound)" if "order=bound" in policy else " (order=recent)"
    return family


def rows_of(piece):
    dense = piece["policies"][0]
    base_ppl = dense["perplexity"]["overall"]
    rows = []
    for p in piece["policies"][1:]:
        c, t = retrieval(p)
        rows.append({
            "policy": p["policy"],
            "ppl": p["perplexity"]["overall"],
            "ppl_rel": p["perplexity"]["overall"] / base_ppl - 1,
            "ret": c / t if t else float("nan"),
            "ret_n": f"{c}/{t}",
            "bytes": p["work"]["kv_bytes_relative_to_dense"],
            "tps": p["work"]["decode_tokens_per_s"],
        })
    dc, dt = retrieval(dense)
    return {"ppl": base_ppl, "ret_n": f"{dc}/{dt}", "ret": dc / dt if dt else float("nan"),
            "tps": dense["work"]["decode_tokens_per_s"]}, rows


def plot(name, families, dense, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"frontier_report: no matplotlib, {path} not drawn")
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    colors = plt.get_cmap("tab20").colors
    markers = "osD^vP*Xh<>"
    for i, (fam, rows) in enumerate(sorted(families.items())):
        rows = sorted(rows, key=lambda r: r["bytes"])
        xs = [r["bytes"] for r in rows]
        style = dict(marker=markers[i % len(markers)], color=colors[(2 * i) % 20 + (i // 10) % 2], label=fam)
        a.plot(xs, [100 * r["ppl_rel"] for r in rows], **style)
        b.plot(xs, [r["ret"] for r in rows], **style)
    top = max(100 * r["ppl_rel"] for rows in families.values() for r in rows)
    a.set_ylim(-3, min(top + 2, 30))  # the points above 30% are in the table; the 1% band is what matters
    a.axhline(0, color="k", lw=0.8)
    a.axhline(1, color="gray", lw=0.8, ls="--")
    b.axhline(dense["ret"], color="k", lw=0.8)
    b.set_ylim(-0.05, 1.05)
    a.set(xlabel="KV bytes read per step / dense", ylabel="perplexity vs dense (%)", title=f"{name}: perplexity")
    b.set(xlabel="KV bytes read per step / dense", ylabel="retrieval accuracy", title=f"{name}: retrieval")
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(out, md):
    pieces = {}
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        name, family = os.path.basename(path)[:-5].rsplit("-", 1)
        pieces.setdefault(name, {})[family] = json.load(open(path))
    L = ["<!-- frontier:begin -->", "## The quality/bytes frontier", "",
         f"Written by `bench/frontier.sh` / `bench/frontier_report.py` from `{out}/`."
         " Perplexity: teacher-forced decode after a dense prefill (DESIGN.md section 7), relative to dense"
         " on the same windows; retrieval: the needle task (SmolLM2, through its chat template) or the"
         " passkey task (demo model), all kinds and lengths together; KV read: bytes per decode step"
         " (keys, values and metadata) relative to dense.", ""]
    for name, fams in pieces.items():
        families, dense = {}, None
        for _, piece in sorted(fams.items()):
            d, rows = rows_of(piece)
            dense = dense or d  # every group's dense is the same model, windows and prompts
            for r in rows:
                families.setdefault(family_of(r["policy"]), []).append(r)
        first = next(iter(fams.values()))
        L += [f"### {name} ({first['model']}, ctx {first['ctx']})", "",
              f"Dense: perplexity {dense['ppl']:.3f}, retrieval {dense['ret_n']}, {dense['tps']:.1f} tok/s.", "",
              "| policy | ppl | vs dense | retrieval | KV read | tok/s |", "| --- | --- | --- | --- | --- | --- |"]
        for family in sorted(families):
            for r in sorted(families[family], key=lambda r: r["bytes"]):
                L.append(f"| `{r['policy']}` | {r['ppl']:.3f} | {100 * r['ppl_rel']:+.1f}% | {r['ret_n']} |"
                         f" {r['bytes']:.3f} | {r['tps']:.1f} |")
        png = os.path.join(out, f"{name}.png")
        if plot(name, families, dense, png):
            L += ["", f"![{name}]({os.path.relpath(png, os.path.dirname(md))})"]
        L.append("")
    L.append("<!-- frontier:end -->")
    write_block(md, "frontier", L)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
