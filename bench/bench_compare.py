#!/usr/bin/env python3
"""Compares `skim bench --json` runs of two builds timed in the same session (issue 15's
"nothing lost": within 2% of the previous revision's binary).

    bench/bench_compare.py NEW.json[,NEW2.json...] OLD.json[,OLD2.json...] [--md OUT.md]

Each build may have several runs (interleaved A B A B on the GPU machine): the best time of
each point over its runs is compared, as repeated timings of the same work differ only by
noise that adds time. Prints one markdown table: point, old, new, new/old (for tokens/s,
old/new, so that above 1 is always slower).
"""
import argparse
import json


def points(run):
    """(section, key) -> (value, lower_is_better) for every timed point of one bench JSON."""
    out = {}
    for a in run.get("attention", []):
        out[("decode attention us", f"batch {a['batch']} ctx {a['context']}")] = (a["us"], True)
    for a in run.get("sparse_attention", []):
        out[("gbsa select+attend us", f"batch {a['batch']} ctx {a['context']}")] = (a["us"], True)
    for a in run.get("quest_attention", []):
        out[("quest select+attend us", f"batch {a['batch']} ctx {a['context']}")] = (a["us"], True)
    for e in run.get("end_to_end", []):
        key = f"{e['model']} {e['policy']} batch {e['batch']} ctx {e['context']}"
        out[("step ms/token", key)] = (e["ms_per_token"], True)
    for p in run.get("prefill", []):
        out[("prefill tokens/s", f"{p['model']} ctx {p['context']} chunk {p['chunk']}")] = (p["tokens_per_s"], False)
    return out


def best(paths):
    merged = {}
    for path in paths:
        with open(path) as f:
            for k, (v, lower) in points(json.load(f)).items():
                if k not in merged:
                    merged[k] = (v, lower)
                else:
                    old, _ = merged[k]
                    merged[k] = (min(old, v) if lower else max(old, v), lower)
    return merged


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("new")
    ap.add_argument("old")
    ap.add_argument("--md", help="also write the table here")
    args = ap.parse_args()
    new, old = best(args.new.split(",")), best(args.old.split(","))
    lines = ["| section | point | old | new | slowdown (new/old time) |", "| --- | --- | --- | --- | --- |"]
    worst = 0.0
    for key in sorted(set(new) & set(old)):
        (n, lower), (o, _) = new[key], old[key]
        slowdown = n / o if lower else o / n
        worst = max(worst, slowdown)
        lines.append(f"| {key[0]} | {key[1]} | {o:.4g} | {n:.4g} | {slowdown:.3f} |")
    lines.append("")
    lines.append(f"worst slowdown: {worst:.3f} ({len(set(new) & set(old))} points)")
    text = "\n".join(lines)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
