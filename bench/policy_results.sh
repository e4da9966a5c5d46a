#!/usr/bin/env bash
# Issue 3's quality-vs-dense numbers on the demo model: dense, streaming, quest, gbsa (no
# rectification) and resa at a 10% budget, 16K context, on the held-out Python.
#   bench/policy_results.sh            run the pieces not yet done, then write docs/results.md
#   FORCE=1 bench/policy_results.sh    run every piece again
#   REPORT_ONLY=1 ...                  only rewrite docs/results.md from bench/results/
# Each piece writes its own JSON under bench/results/policy-*.json as soon as it finishes, and
# its section of docs/results.md (between the policy-core:begin/end markers; the other sections
# belong to other scripts and are kept) is rewritten after every piece, so an interrupted run keeps
# what it did.
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
w("dense rectification every 32 tokens), `streaming` with 4 sinks + a window making 10% of the 16K context")
w("(a fixed token count, so a larger share of the shorter passkey prompts; see the passkey section).")
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
    # What each policy read during the passkey decode steps (question and answer), against dense.
    work = {}
    for name, j in pk.items():
        for p in j["policies"]:
            wp = p.get("work_passkey")
            if wp and wp["decode_steps"]:
                for keys, by_len in p["passkey"].items():
                    for length in by_len:
                        work[(p["policy"], int(keys), int(length))] = wp
    if work:
        w("KV bytes read per passkey decode step relative to dense (the budget each policy actually used):")
        w("")
        w("| policy | " + " | ".join(f"{k}-key {lab(l)}" for k, l in cols) + " |")
        w("| --- | " + " | ".join("---" for _ in cols) + " |")
        for n in names:
            w(f"| `{n}` | " + " | ".join(
                (f"{work[(n,k,l)]['kv_bytes_relative_to_dense']:.3f}x" if (n, k, l) in work else "-") for k, l in cols) + " |")
        w("")
    sw = [n for n in names if n.startswith("streaming") and "window=" in n]
    if sw:
        win_tokens = int(sw[0].split("window=")[1].split(",")[0])
        w(f"`streaming` keeps the same {win_tokens}-token window at every length (10% of 16K), so it sees the")
        w("last " + ", ".join(f"{100 * (win_tokens + 4) / l:.0f}% of a {lab(l)}" for l in sorted({l for _, l in cols})) +
          " prompt, and can only answer when the asked key lies in that window. Depths of the asked key at")
        answered = []
        for k, l in cols:
            j = pk[f"passkey{k}-{l}"]
            p = next(p for p in j["policies"] if p["policy"] == sw[0])
            bd = p["passkey"][str(k)][str(l)].get("by_depth", {})
            ok = [d for d, c in sorted(bd.items(), key=lambda x: float(x[0])) if c["correct"]]
            answered.append(f"{k}-key {lab(l)}: " + (", ".join(ok) if ok else "none"))
        w("which it answered any prompt: " + "; ".join(answered) + ".")
    rect = {n: sum(work[c]["rectified_tokens"] for c in work if c[0] == n) for n in names if n.startswith("resa")}
    for n, t in rect.items():
        if t == 0:
            steps = max(work[c]["decode_steps"] / pk[f"passkey{c[1]}-{c[2]}"]["prompts"] for c in work if c[0] == n)
            f = n.split("f=")[1].split(",")[0] if "f=" in n else "f"
            w(f"`{n}` rectified no tokens here: a passkey prompt takes about {steps:.0f} decode steps, fewer")
            w(f"than the rectification period ({f}), so on this task ReSA is its selection alone and equals `gbsa` by")
            w("construction; the passkey table cannot tell the two apart.")
    if sw or rect:
        w("")
    missing = [f"{k}-key {lab(l)}" for k in (1, 4) for l in (4096, 8192, 16384) if f"passkey{k}-{l}" not in pk]
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
        pkr = [(k, l, cells[(n, k, l)]) for n in names if n.startswith("resa") for (nn, k, l) in cells if nn == n] if pk else []
        if pkr:
            def tot(prefix):
                n = next((x for x in names if x.split(":")[0] == prefix), None)
                got = [cells[(n, k, l)] for k, l, _ in pkr if n and (n, k, l) in cells]
                return sum(c["correct"] for c in got), sum(c["total"] for c in got)
            (rc, rt), (gc, gt), (dc, dt) = tot("resa"), tot("gbsa"), tot("dense")
            w(f"Passkey and 4-key retrieval, summed over the {len(pkr)} (keys, length) cells recorded: ReSA {rc}/{rt} correct, gbsa")
            w(f"{gc}/{gt}, dense {dc}/{dt}; rectification does not act within a passkey prompt (see that section),")
            w("so this is a test of the block selection only, not of ReSA's claim about drift.")
            w("")
        w("Note: the output error is measured per step against dense attention over the *policy's own* cache,")
        w("so it shows selection error; drift from KV written under sparse attention shows in the perplexity")
        w("by bucket and in the agreement.")
        if win["docs"] == 1:
            w("With one text window (DOCS=1) perplexity differences of a few tenths of a percent are within")
            w("noise, and greedy agreement on one prompt is a weak signal; DOCS=4 averages more windows.")
# Only this script's section is rewritten: docs/results.md also holds sections other scripts own
# (<!-- NAME:begin ... --> ... <!-- NAME:end -->), which are kept as they are.
BEGIN = "<!-- policy-core:begin (bench/policy_results.sh rewrites this section) -->"
END = "<!-- policy-core:end -->"
section = BEGIN + "\n" + "\n".join(L) + "\n" + END + "\n"
old = open(md).read() if os.path.exists(md) else ""
b, e = old.find("<!-- policy-core:begin"), old.find(END)
if b >= 0 and e > b:  # replace our section in place
    rest = old[e + len(END):].lstrip("\n")
    text = old[:b] + section + ("\n" + rest if rest.strip() else "")
elif b >= 0 or e >= 0:
    sys.exit(f"policy_results: {md} has an unmatched policy-core marker; fix it by hand")
else:  # first run with markers: our old text is everything before the first other section
    first = old.find("<!-- ", 0)
    while first >= 0 and ":begin" not in old[first:old.find("-->", first)]:
        first = old.find("<!-- ", first + 1)
    text = section + ("\n" + old[first:] if first >= 0 else "")
tmp = md + ".tmp"
open(tmp, "w").write(text)
os.replace(tmp, md)
print(f"policy_results: wrote {md} (policy-core section)")
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
