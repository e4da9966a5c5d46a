#!/usr/bin/env bash
# Issue 3's quality-vs-dense numbers on the demo model: dense, streaming, quest, gbsa (no
# rectification) and resa at a 10% budget, 16K context, on the held-out Python.
#   bench/policy_results.sh            run the pieces not yet done, then write docs/results.md
#   FORCE=1 bench/policy_results.sh    run every piece again
#   REPORT_ONLY=1 ...                  only rewrite docs/results.md from bench/results/
# Each piece writes its own JSON under bench/results/policy-*.json as soon as it finishes, and
# docs/results.md is rewritten after every piece, so an interrupted run keeps what it did.
# Env: SKIM (binary), THREADS (default 1: on a shared 2-core machine OpenMP threads that
# contend for cores slow decoding down many times), PROMPTS (40), DOCS (1), CTX (16384);
# for a quick trial also OUT, MD, DECODE, AGREE, LENGTHS.
set -euo pipefail
cd "$(dirname "$0")/.."

SKIM=${SKIM:-$( [ -x build/skim ] && echo build/skim || echo build-eval/skim )}
THREADS=${THREADS:-1}
PROMPTS=${PROMPTS:-40}
DOCS=${DOCS:-1}
CTX=${CTX:-16384}
OUT=${OUT:-bench/results}
MD=${MD:-docs/results.md}
DECODE=${DECODE:-2048}
AGREE=${AGREE:-256}
LENGTHS=${LENGTHS:-"4096 8192 16384"}
# 10% of 16K = 1638 tokens: streaming keeps 4 sinks + 1634 recent tokens.
POLICIES="dense,streaming:sink=4,window=$((CTX / 10 - 4)),quest:budget=0.1,gbsa:keep=0.1,resa:keep=0.1,f=32"
mkdir -p "$OUT"

piece() {  # name, flags...
  local name=$1
  shift
  local json="$OUT/policy-$name.json"
  if [ -s "$json" ] && [ -z "${FORCE:-}" ]; then
    echo "policy_results: $name done before ($json)"
    return
  fi
  echo "policy_results: $name started $(date -u +%H:%M:%S)"
  "$SKIM" eval --policy "$POLICIES" --ctx "$CTX" --threads "$THREADS" --json "$@" > "$json.tmp"
  mv "$json.tmp" "$json"
  echo "policy_results: $name finished $(date -u +%H:%M:%S)"
  report
}

report() {
  python3 - "$OUT" "$MD" "$THREADS" <<'PY'
import glob, json, os, sys
out, md, threads = sys.argv[1], sys.argv[2], sys.argv[3]
pieces = {os.path.basename(p)[len("policy-"):-5]: json.load(open(p)) for p in sorted(glob.glob(f"{out}/policy-*.json"))}
L = []
w = L.append
w("# Results: attention policies against dense on the demo model")
w("")
w("Written by `bench/policy_results.sh` from `bench/results/policy-*.json` (one file per piece; rerun the")
w("script to fill in pieces not yet run). Model `models/demo-code-28m`, held-out text `data/heldout-python`,")
w(f"CPU backend, {threads} thread(s). Protocols: DESIGN.md section 7 and `docs/guide.md` (`skim eval`).")
w("Budget 10% for every sparse policy: `quest:budget=0.1` (Quest keeps layers 0-1 dense, its default),")
w("`gbsa:keep=0.1` (ReSA's block selection without rectification), `resa:keep=0.1,f=32` (the same plus")
w("dense rectification every 32 tokens), `streaming` with 4 sinks + a window making 10% of the context.")
w("")
win = pieces.get("windows")
if win:
    pols = win["policies"]
    dense = pols[0]
    nb = win["buckets"]
    w(f"## Perplexity under sparse decoding ({win['ctx']} context)")
    w("")
    w(f"Dense prefill of {win['window_prefill_tokens']} tokens, then {win['decode_tokens']} tokens teacher-forced one decode step")
    w(f"at a time under the policy ({win['docs']} window(s) of held-out text, seed {win['seed']}); perplexity by")
    w(f"{nb} position buckets of the decoded tokens; plot: `bench/results/policy-ppl.png`.")
    w("")
    w("| policy | " + " | ".join(f"bucket {b+1}" for b in range(nb)) + " | all | vs dense |")
    w("| --- | " + " | ".join("---" for _ in range(nb)) + " | --- | --- |")
    d_all = dense["perplexity"]["overall"]
    for p in pols:
        pp = p["perplexity"]
        w(f"| `{p['policy']}` | " + " | ".join(f"{x:.3f}" for x in pp["buckets"]) +
          f" | {pp['overall']:.3f} | {100*(pp['overall']/d_all-1):+.2f}% |")
    w("")
    w("![perplexity by position bucket](../bench/results/policy-ppl.png)")
    w("")
    w("## Attention-output error per layer")
    w("")
    w("||o_policy - o_dense|| / ||o_dense|| on the same teacher-forced decode steps, per (step, query head):")
    w("mean / p90 by layer.")
    w("")
    nl = len(dense["output_error"]["layers"])
    w("| policy | " + " | ".join(f"layer {l}" for l in range(nl)) + " | mean |")
    w("| --- | " + " | ".join("---" for _ in range(nl)) + " | --- |")
    for p in pols:
        e = p["output_error"]
        w(f"| `{p['policy']}` | " + " | ".join(f"{x['mean']:.3f} / {x['p90']:.3f}" for x in e["layers"]) + f" | {e['mean']:.4f} |")
    w("")
    w(f"## Long-generation agreement ({pols[0]['agreement']['tokens']} greedy tokens from the same prompt)")
    w("")
    w("| policy | tokens before first divergence | edit similarity |")
    w("| --- | --- | --- |")
    for p in pols:
        a = p["agreement"]
        w(f"| `{p['policy']}` | {a['first_divergence']:.0f} | {a['edit_similarity']:.3f} |")
    w("")
    w(f"## Work per decode step at {win['ctx']} context")
    w("")
    w("KV bytes read per decode step: key/value rows read x head_dim x 2 x 4 bytes, plus selection metadata")
    w("(page digests), plus rectification (one dense pass over the cache every f tokens, amortised); dense is")
    w("what dense attention reads at the same positions. Speed: CPU decode tokens/s over the teacher-forced and")
    w("greedy steps, the output-error reference computation excluded.")
    w("")
    w("| policy | KV MB / step | vs dense | rectification MB / step | rectified tokens | decode tok/s |")
    w("| --- | --- | --- | --- | --- | --- |")
    for p in pols:
        k = p["work_windows"]
        w(f"| `{p['policy']}` | {k['kv_bytes_per_step']/1e6:.2f} | {k['kv_bytes_relative_to_dense']:.3f}x | "
          f"{k['rectify_bytes_per_step']/1e6:.2f} | {k['rectified_tokens']} | {k['decode_tokens_per_s']:.1f} |")
    w("")
pk = {k: v for k, v in pieces.items() if k.startswith("passkey")}
if pk:
    w("## Passkey retrieval")
    w("")
    w("Definition lines `SECRET_<NAME> = <5 digits>` at line boundaries of held-out code; the haystack and")
    w("definitions are prefilled densely, then the question line `assert SECRET_<NAME> ==` is fed as decode")
    w("steps under the policy and the answer generated greedily (so the policy, not the dense prefill, does")
    w("the retrieval). Asked key at depths 0.1/0.3/0.5/0.7/0.9 in turn; 4-key: three more keys at random")
    w("depths. Correct / prompts.")
    w("")
    cells = {}
    names = []
    for name, j in sorted(pk.items()):
        for p in j["policies"]:
            if p["policy"] not in names: names.append(p["policy"])
            for keys, by_len in p["passkey"].items():
                for length, c in by_len.items():
                    cells[(p["policy"], int(keys), int(length))] = c
    cols = sorted({(k, l) for (_, k, l) in cells})
    lab = lambda l: f"{l//1024}K" if l % 1024 == 0 else str(l)
    w("| policy | " + " | ".join(f"{k}-key {lab(l)}" for k, l in cols) + " |")
    w("| --- | " + " | ".join("---" for _ in cols) + " |")
    for n in names:
        w(f"| `{n}` | " + " | ".join(
            (f"{cells[(n,k,l)]['correct']}/{cells[(n,k,l)]['total']}" if (n, k, l) in cells else "-") for k, l in cols) + " |")
    w("")
    missing = [f"{k}-key {l}" for k in (1, 4) for l in (4096, 8192, 16384) if f"passkey{k}-{l}" not in pk]
    if missing:
        w("Not run yet: " + ", ".join(missing) + ".")
        w("")
if win:
    by = {p["policy"].split(":")[0]: p for p in win["policies"]}
    def rel(name):
        return 100 * (by[name]["perplexity"]["overall"] / by["dense"]["perplexity"]["overall"] - 1)
    def last(name):
        return 100 * (by[name]["perplexity"]["buckets"][-1] / by["dense"]["perplexity"]["buckets"][-1] - 1)
    w("## Is ReSA near lossless where plain block-sparse decoding drifts?")
    w("")
    if "resa" in by and "gbsa" in by:
        r, g = rel("resa"), rel("gbsa")
        w(f"Perplexity over the {win['decode_tokens']} decoded tokens against dense: ReSA {r:+.2f}%, block-sparse")
        w(f"without rectification (gbsa) {g:+.2f}%; in the last bucket {last('resa'):+.2f}% against {last('gbsa'):+.2f}%.")
        w(f"Mean output error: ReSA {by['resa']['output_error']['mean']:.4f}, gbsa {by['gbsa']['output_error']['mean']:.4f}.")
        w(f"Greedy agreement over {by['resa']['agreement']['tokens']} tokens: ReSA edit similarity")
        w(f"{by['resa']['agreement']['edit_similarity']:.3f} (first divergence at {by['resa']['agreement']['first_divergence']:.0f}),")
        w(f"gbsa {by['gbsa']['agreement']['edit_similarity']:.3f} ({by['gbsa']['agreement']['first_divergence']:.0f}).")
        w("")
        gap_last = last("gbsa") - last("resa")
        if abs(r) < 1.0 and (g - r > 0.5 or gap_last > 1.0):
            w("Verdict: yes on this model: ReSA stays within 1% of dense while gbsa drifts further from it,")
            w("which is the papers' claim.")
        elif abs(r) < 1.0 and abs(g) < 1.0:
            w("Verdict: both are within 1% of dense here: the demo model at this context and decode length does")
            w("not show the drift that rectification is there to remove (its attention is concentrated enough")
            w("that 10% of the blocks hold nearly all the mass in most layers, DESIGN.md section 10), so this")
            w("run neither confirms nor refutes the claim; longer decodes or smaller budgets are where to look.")
        elif g > r + 0.5:
            w("Verdict: partly: rectification moves ReSA closer to dense than gbsa, but not to within 1%.")
        else:
            w("Verdict: no: on this model rectification does not bring ReSA measurably closer to dense than")
            w("plain block-sparse decoding.")
        er, eg = by["resa"]["output_error"]["mean"], by["gbsa"]["output_error"]["mean"]
        if eg > 0 and abs(er - eg) / eg < 0.05 and g > 0.5:
            w("")
            w("Why: the loss here is the per-step selection error, which rectification cannot remove (the output")
            w("error per layer is the same with and without it, largest in layer 0, which ReSA does not keep dense,")
            w("and in the retrieval layer 6); the KV drift that rectification repairs is small on this model, as the")
            w("near-equal last buckets show. ReSA's claim is about the drift; on the demo model at a 10% budget the")
            w("selection error dominates, and `quest`, which keeps layers 0-1 dense, loses about as much while")
            w("reading more.")
        w("")
        w("Note: the output error is measured per step against dense attention over the *policy's own* cache,")
        w("so it shows selection error; drift from KV written under sparse attention shows in the perplexity")
        w("by bucket and in the agreement.")
        if win["docs"] == 1:
            w("With one text window (DOCS=1) perplexity differences of a few tenths of a percent are within")
            w("noise, and greedy agreement on one prompt is a weak signal; DOCS=4 averages more windows.")
open(md, "w").write("\n".join(L) + "\n")
print(f"policy_results: wrote {md}")
PY
}

if [ -n "${REPORT_ONLY:-}" ]; then report; exit 0; fi
[ -x "$SKIM" ] || { echo "policy_results: $SKIM not built (bash scripts/build.sh)" >&2; exit 2; }

# Ppl of 2K decoded tokens by bucket, output error, agreement, work and tok/s at 16K.
piece windows --tasks ppl,error,agree --decode-tokens "$DECODE" --buckets 4 --agree-tokens "$AGREE" --docs "$DOCS" \
  --plot "$OUT/policy-ppl.png"
# Passkey: one piece per key count and length, shortest first, so partial runs still report.
for len in $LENGTHS; do
  for keys in 1 4; do
    piece "passkey$keys-$len" --tasks passkey --keys "$keys" --lengths "$len" --prompts "$PROMPTS"
  done
done
report
