#!/usr/bin/env bash
# Issue 4's numbers on the demo model: RetroAttention (quest + retro, w = 2, 4, 8) against quest
# at a 10% budget (sparse-decode perplexity, long-generation agreement, budget growth), and
# CSAttention at keep 5% against quest at 5% (perplexity, passkey and 4-key retrieval, top-K
# recall, table bytes). Same `skim eval` as bench/policy_results.sh; each piece writes
# bench/results/retro-cs-<piece>.json, then the section "RetroAttention and CSAttention" of
# docs/results.md is rewritten (between its markers; the rest of the file is left alone).
#   bench/retro_cs_results.sh          run the pieces not yet done, then write the section
#   FORCE=1 ... / REPORT_ONLY=1 ...    rerun every piece / only rewrite the section
# Env: SKIM, THREADS (1), CTX (16384), DECODE (1024), AGREE (192), CS_DECODE (512), PROMPTS (2),
# ONLY (run just the piece of that name, e.g. cs-passkey4, so two pieces can use two cores).
# Cost on one thread: each passkey prompt is a dense 16K prefill plus one re-encode (and k-means)
# per cs policy, about 4.5 min a prompt alone on a core and 11 min on the shared 2-core machine
# (2 prompts took 1377 s), so PROMPTS=20 is about 1.5-4 h per passkey piece.
set -euo pipefail
cd "$(dirname "$0")/.."

SKIM=${SKIM:-$( [ -x build/skim ] && echo build/skim || echo build-retro/skim )}
THREADS=${THREADS:-1}
CTX=${CTX:-16384}
DECODE=${DECODE:-1024}
AGREE=${AGREE:-192}
CS_DECODE=${CS_DECODE:-512}
PROMPTS=${PROMPTS:-2}
OUT=${OUT:-bench/results}
MD=${MD:-docs/results.md}
RETRO_POLICIES="dense,quest:budget=0.1,quest:budget=0.1+retro:w=2,quest:budget=0.1+retro:w=4,quest:budget=0.1+retro:w=8"
CS_POLICIES="dense,quest:budget=0.05,cs:keep=0.05,recall=1,cs:keep=0.05,pool=group,recall=1"
# Passkey pieces leave pool=group out (it lost clearly on perplexity and recall): every cs policy
# costs one more 16K re-encode per prompt, and more prompts matter more than that variant here.
CS_PASSKEY_POLICIES="dense,quest:budget=0.05,cs:keep=0.05,recall=1"
mkdir -p "$OUT"

piece() {  # name, policies, flags...
  local name=$1 policies=$2
  shift 2
  local json="$OUT/retro-cs-$name.json"
  if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ]; then return; fi
  if [ -s "$json" ] && [ -z "${FORCE:-}" ]; then echo "retro_cs: $name done before"; return; fi
  echo "retro_cs: $name started $(date -u +%H:%M:%S)"
  "$SKIM" eval --policy "$policies" --ctx "$CTX" --threads "$THREADS" --json "$@" > "$json.tmp"
  mv "$json.tmp" "$json"
  echo "retro_cs: $name finished $(date -u +%H:%M:%S)"
}

report() {
  python3 - "$OUT" "$MD" "$THREADS" <<'PY'
import json, os, sys
out, md, threads = sys.argv[1:4]
def load(n):
    p = f"{out}/retro-cs-{n}.json"
    return json.load(open(p)) if os.path.exists(p) else None
L = []; w = L.append
w("<!-- retro-cs:begin (bench/retro_cs_results.sh rewrites this section) -->")
w("## RetroAttention and CSAttention")
w("")
w(f"Written by `bench/retro_cs_results.sh` from `bench/results/retro-cs-*.json`; `skim eval` on the demo")
w(f"model, held-out Python, CPU, {threads} thread(s). Prefill is dense; the policies act on decode steps.")
w("")
r = load("retro")
if r:
    pols = r["policies"]; d = pols[0]; nb = r["buckets"]
    w(f"### RetroAttention against Quest at a 10% budget ({r['ctx']} context)")
    w("")
    w(f"Dense prefill of {r['window_prefill_tokens']} tokens, then {r['decode_tokens']} tokens teacher-forced one decode")
    w(f"step at a time ({r['docs']} window, seed {r['seed']}); perplexity by {nb} position buckets. Agreement: greedy")
    w(f"generation of {pols[0]['agreement']['tokens']} tokens against dense from the same prompt. Quest keeps layers 0-1 dense.")
    w("`budget growth`: keys each query saw over its window / keys of its own selection;")
    w("`extra rows`: past rows run per step (extra linear-layer rows).")
    w("")
    w("| policy | " + " | ".join(f"ppl bucket {b+1}" for b in range(nb)) + " | ppl all | vs dense | first divergence | edit similarity | budget growth | extra rows / step | decode tok/s |")
    w("|---|" + "---|" * (nb + 8))
    dall = d["perplexity"]["overall"]
    for p in pols:
        pp = p["perplexity"]; a = p["agreement"]; c = p.get("counters", {})
        g = f"{c['retro_budget_growth']:.3f}" if "retro_budget_growth" in c else "-"
        x = f"{c['retro_extra_rows_per_step']:.2f}" if "retro_extra_rows_per_step" in c else "-"
        w(f"| `{p['policy']}` | " + " | ".join(f"{v:.3f}" for v in pp["buckets"]) +
          f" | {pp['overall']:.3f} | {100*(pp['overall']/dall-1):+.2f}% | {a['first_divergence']:.0f} | {a['edit_similarity']:.3f} | {g} | {x} | {p['work_windows']['decode_tokens_per_s']:.1f} |")
    w("")
    q = next((p for p in pols if p["policy"] == "quest:budget=0.1"), None)
    if q:
        qa, qb = q["perplexity"]["overall"], q["perplexity"]["buckets"][-1]
        da, db = dall, d["perplexity"]["buckets"][-1]
        parts = []
        for p in pols:
            if "retro" not in p["policy"]: continue
            ra, rb = p["perplexity"]["overall"], p["perplexity"]["buckets"][-1]
            parts.append(f"w = {p['policy'].split('w=')[1]}: {100*(qa-ra)/(qa-da):+.1f}% overall, {100*(qb-rb)/(qb-db):+.1f}% in the last bucket")
        w("Share of Quest's perplexity gap to dense that Retro closes (positive = closer to dense): " + "; ".join(parts) + ".")
        w("")
c = load("cs-ppl")
pk = [load(n) for n in ("cs-passkey1", "cs-passkey4")]
if c or any(pk):
    w(f"### CSAttention at keep 5% against Quest at 5%")
    w("")
    w("CS: M = 8 subspaces x 16 dims, C = 64 centroids, 10 k-means iterations, L = 0.1 x prompt, W = 64,")
    w("s = 1, back-off to 2 centroids below cosine 0.3; `pool=head` (a search per query head) and")
    w("`pool=group` (the group's mean query). The eval prefills densely under `dense` and switches")
    w("policy afterwards, so the engine re-encodes the prompt once under `cs` to build its tables.")
    w("Recall: fraction of the true top-K keys (largest q.k, K = 5% of the context, per query head) the")
    w("selection covers, over the decode steps of the perplexity run.")
    w("")
    rows = {}
    if c:
        for p in c["policies"]:
            rows.setdefault(p["policy"], {})["ppl"] = p["perplexity"]["overall"]
            rows[p["policy"]]["counters"] = p.get("counters", {})
            rows[p["policy"]]["kv"] = p["work_windows"]["kv_bytes_relative_to_dense"]
        dall = c["policies"][0]["perplexity"]["overall"]
    dot = load("cs-dot")
    if dot and c:
        for p in dot["policies"][1:]:
            rows.setdefault(p["policy"], {})["ppl"] = p["perplexity"]["overall"] * dall / dot["policies"][0]["perplexity"]["overall"]
            rows[p["policy"]]["counters"] = p.get("counters", {})
            rows[p["policy"]]["kv"] = p["work_windows"]["kv_bytes_relative_to_dense"]
    # cs:score=dot's passkey pieces (optional) share the prompts; their dense rows repeat.
    dot_pk = [load(n) for n in ("cs-dot-passkey1", "cs-dot-passkey4")]
    for j in pk + dot_pk:
        if not j: continue
        for p in j["policies"]:
            if j in dot_pk and p["policy"] == "dense": continue
            for keys, by_len in p["passkey"].items():
                for length, cell in by_len.items():
                    rows.setdefault(p["policy"], {})[f"pk{keys}"] = f"{cell['correct']}/{cell['total']}"
            if not c: rows[p["policy"]]["counters"] = p.get("counters", {})
    w(f"| policy | ppl ({c['decode_tokens'] if c else '-'} decoded) | vs dense | passkey 1-key | passkey 4-key | top-K recall | union keys / search | table MB | KV read vs dense |")
    w("|---|---|---|---|---|---|---|---|---|")
    for name, v in rows.items():
        cc = v.get("counters", {})
        ppl = f"{v['ppl']:.3f}" if "ppl" in v else "-"
        rel = f"{100*(v['ppl']/dall-1):+.2f}%" if "ppl" in v else "-"
        rec = f"{cc['cs_recall']:.3f}" if "cs_recall" in cc else "-"
        un = f"{cc['cs_union_keys']:.0f}" if "cs_union_keys" in cc else "-"
        tb = f"{cc['cs_table_bytes']/1e6:.1f}" if "cs_table_bytes" in cc else "-"
        kv = f"{v['kv']:.3f}x" if "kv" in v else "-"
        w(f"| `{name}` | {ppl} | {rel} | {v.get('pk1','-')} | {v.get('pk4','-')} | {rec} | {un} | {tb} | {kv} |")
    w("")
if r or c:
    w("### What these runs say")
    w("")
    counts = sorted({j["prompts"] for j in pk if j})
    if len(counts) > 1:
        npk = " and ".join(f"{j['prompts']} ({j['keys'][0]}-key)" for j in pk if j)
    else:
        npk = str(counts[0]) if counts else "no"
    few = not counts or min(counts) < 10
    w(f"- Small samples: one 16K window (1024 teacher-forced tokens for Retro, 512 for CS), {npk} passkey prompts")
    w("  per variant (each needs a 16K dense prefill plus one re-encode per `cs` policy on a shared 2-core")
    w("  machine). Treat differences under ~1% perplexity as noise." + (" At 16K even dense retrieves only some" if few else ""))
    if few:
        w(f"  passkeys on this model, so {npk} prompts per variant do not separate the policies on retrieval.")
    w("- RetroAttention works as specified (its mask equals equation (7)'s set difference, w = 1 is Quest,")
    w("  a full budget is dense; tests in `tests/attention/retro_test.cpp`, `tests/engine/retro_engine_test.cpp`)")
    w("  and grows the keys each query sees by the `budget growth` column (more than the paper's 1.17x at")
    w("  w = 2 on Llama-3.1-8B), but on the demo model it does not measurably close Quest's perplexity gap,")
    w("  overall or late in the decode, and greedy agreement is unchanged: the paper's claim is not")
    w("  reproduced here. Likely reasons: the supplement reaches only the last w-1 tokens' K/V, and on this")
    w("  model Quest's loss sits in the retrieval heads of layers 6-7 (DESIGN.md section 10), where the")
    w("  supplementary pages carry little mass for the past query; the paper's gains are on 4K-8K-token")
    w("  generations of an 8B model. On the CPU the w-1 extra rows cost real time (decode tok/s column); on")
    w("  a GPU the linear layers are memory-bound and the paper measures 3-7%.")
    w("- CSAttention at keep 5% reads the fewest KV bytes but loses clearly to Quest at 5% here: its top-K")
    w("  recall is low, and pooling the group's query lowers it further. The cosine list scores drop the key")
    w("  norm and the weight of each subspace; `cs:score=dot` (ours) keeps both, which raises recall and")
    w("  lowers perplexity (its row; same window, dense identical), still short of Quest. Tables cost the")
    w("  `table MB` column per 16K sequence (8 layers x 1 KV group), against 134 MB of fp32 KV.")
    pk_rows = {name: v for name, v in rows.items() if "pk1" in v or "pk4" in v} if (c or any(pk)) else {}
    cs_pk = {name: v for name, v in pk_rows.items() if name.startswith("cs:")}
    if cs_pk:
        d, q = pk_rows.get("dense", {}), pk_rows.get("quest:budget=0.05", {})
        got = "; ".join(f"`{name}` {v.get('pk1', '-')} and {v.get('pk4', '-')}" for name, v in cs_pk.items())
        w(f"- Retrieval (1-key and 4-key passkey at 16K): dense {d.get('pk1', '-')} and {d.get('pk4', '-')}, quest at 5%")
        w(f"  {q.get('pk1', '-')} and {q.get('pk4', '-')}; {got}.")
        if all(v.get(k, "0/").startswith("0/") for v in cs_pk.values() for k in ("pk1", "pk4") if k in v):
            w("  CS answers none: its recall of the true top-K keys is near 0.3 on the perplexity run, so a")
            w("  needle's keys are likely among those it misses, while Quest's page bound (an upper bound of q.k)")
            w("  answers as often as dense. The paper's result (larger models, its own calibration) is not")
            w("  reproduced on the demo model.")
    w("")
w("<!-- retro-cs:end -->")
section = "\n".join(L) + "\n"
old = open(md).read() if os.path.exists(md) else ""
b, e = old.find("<!-- retro-cs:begin"), old.find("<!-- retro-cs:end -->")
if b >= 0 and e >= 0:
    new = old[:b] + section + old[e + len("<!-- retro-cs:end -->\n"):]
else:
    new = old + ("\n" if old and not old.endswith("\n\n") else "") + section
open(md, "w").write(new)
print(f"retro_cs: wrote the section of {md}")
PY
}

if [ -n "${REPORT_ONLY:-}" ]; then report; exit 0; fi
[ -x "$SKIM" ] || { echo "retro_cs: $SKIM not built" >&2; exit 2; }

case "${PART:-all}" in
  retro|all)
    piece retro "$RETRO_POLICIES" --tasks ppl,agree --decode-tokens "$DECODE" --agree-tokens "$AGREE" --buckets 4
    report ;;
esac
case "${PART:-all}" in
  cs|all)
    piece cs-ppl "$CS_POLICIES" --tasks ppl --decode-tokens "$CS_DECODE" --buckets 2
    report
    piece cs-dot "dense,cs:keep=0.05,score=dot,recall=1" --tasks ppl --decode-tokens "$CS_DECODE" --buckets 2
    report
    piece cs-passkey1 "$CS_PASSKEY_POLICIES" --tasks passkey --keys 1 --lengths "$CTX" --prompts "$PROMPTS"
    report
    piece cs-passkey4 "$CS_PASSKEY_POLICIES" --tasks passkey --keys 4 --lengths "$CTX" --prompts "$PROMPTS"
    report
    piece cs-dot-passkey1 "dense,cs:keep=0.05,score=dot,recall=1" --tasks passkey --keys 1 --lengths "$CTX" --prompts "$PROMPTS"
    piece cs-dot-passkey4 "dense,cs:keep=0.05,score=dot,recall=1" --tasks passkey --keys 4 --lengths "$CTX" --prompts "$PROMPTS"
    report ;;
esac
