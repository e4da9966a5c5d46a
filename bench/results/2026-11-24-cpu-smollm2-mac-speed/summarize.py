"""The table of README.md from results.jsonl (run.sh): per policy, context, threads and build,
the first decode step and the steady step (median of steps 2..33 in each run; the spread is
the lowest and highest of those medians over repetitions; wall time, and the CPU time of all
the process's threads), decode tokens/s at the steady step (wall),
bytes read per step relative to dense (each build's own counter), the mac hit rate and the
time of set_policy("mac") after a dense prefill."""
import json
import statistics as st
import sys
from collections import defaultdict

path = sys.argv[1] if len(sys.argv) > 1 else "results.jsonl"
runs = defaultdict(list)
checks = []
for line in open(path):
    j = json.loads(line)
    if j.get("check"):
        checks.append(j)
        continue
    runs[(j["policy"], j["ctx"], j["threads"], j["build"])].append(j)

dense_bytes = {(c, b): st.median(r["kv_bytes_per_step"] for r in v)
               for (p, c, t, b), v in runs.items() if p == "dense"}


def spread(xs, fmt):
    m = st.median(xs)
    return fmt % m if len(xs) == 1 else (fmt + " (" + fmt + "-" + fmt + ")") % (m, min(xs), max(xs))


print("| policy | context | threads | build | runs | first decode step, ms | steady step, ms | steady step CPU, ms | tok/s | bytes read / dense | mac hit rate | set_policy, s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
order = {"dense": 0, "mac": 1, "dense->mac": 2}
for key in sorted(runs, key=lambda k: (k[1], k[2], order.get(k[0], 9), k[3])):
    p, c, t, b = key
    v = runs[key]
    first = [r["step_ms"][0] for r in v]
    steady = [st.median(r["step_ms"][1:]) for r in v]
    cpu = [st.median(r["step_cpu_ms"][1:]) for r in v]
    rel = st.median(r["kv_bytes_per_step"] for r in v) / dense_bytes[(c, b)]
    hit = "%.3f" % v[0]["mac_hit_rate"] if "mac_hit_rate" in v[0] else ""
    sw = spread([r["switch_s"] for r in v], "%.1f") if "->" in p else ""
    print(f"| {p} | {c} ({v[0]['prompt_tokens']}) | {t} | {b} | {len(v)} | {spread(first, '%.0f')} | "
          f"{spread(steady, '%.1f')} | {spread(cpu, '%.1f')} | {1000 / st.median(steady):.1f} | {rel:.3f} | {hit} | {sw} |")

if checks:
    print()
    print("| build | policy | decode(2), s | decode(34), s | (decode(34) - decode(2)) / 32, ms |")
    print("| --- | --- | --- | --- | --- |")
    by = defaultdict(dict)
    for j in checks:
        by[(j["build"], j["policy"])][j["n"]] = j["decode_s"]
    for (b, p), d in sorted(by.items()):
        print(f"| {b} | {p} | {d[2]:.2f} | {d[34]:.2f} | {(d[34] - d[2]) / 32 * 1000:.0f} |")
