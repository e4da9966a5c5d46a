"""Writes the section "MAC-Attention and ART" of docs/results.md from bench/results/mac-art-*.json
(bench/mac_art_results.sh runs the pieces). Only the text between the section markers changes."""
import glob, json, os, sys

out, md, threads, ctx, decode, agree = sys.argv[1:7]
pieces = {os.path.basename(p)[len("mac-art-"):-5]: json.load(open(p)) for p in sorted(glob.glob(f"{out}/mac-art-*.json"))}
docs = sorted({j.get("docs", 1) for j in pieces.values()}) or [1]
windows = " or ".join(str(d) for d in docs)
windows_text = ("one window" if docs == [1] else f"{docs[0]} windows" if len(docs) == 1
                else f"{windows} windows (each piece's count is its JSON's `docs`)")
L = []
w = L.append
w("<!-- mac-art:begin (bench/mac_art_results.sh rewrites this section) -->")
w("## MAC-Attention and ART")
w("")
w("Written by `bench/mac_art_results.sh` from `bench/results/mac-art-*.json`: `skim eval` on the demo model,")
w(f"{windows_text} of `data/heldout-python` at {ctx} tokens: prefill {int(ctx) - int(decode)} tokens densely, then {decode}")
w(f"teacher-forced decode steps (perplexity, attention-output error per layer against dense) and {agree} greedy")
w(f"tokens compared with dense; CPU, {threads} thread(s). Short runs (this machine has 2 shared cores): the")
w(f"numbers are {'one window' if docs == [1] else 'means over ' + windows + ' windows'}, indicative, not converged. MAC: K=1024, r=256. `mac_dist` is the nearest")
w("pre-RoPE distance divided by sqrt(2d) (a hit is `dist < 1 - tau`); `qnorm` is ||q~|| / sqrt(d), 1 in the")
w("paper's isotropic model. KV read is relative to dense and counts the keys read per step (MAC: band+tail")
w("on a hit; the new ring entry's partial is part of it).")
w("")

def fmt(x, f="{:.3f}"):
    return "-" if x is None else f.format(x)

def row(p):
    c = p.get("counters", {})
    ppl = p.get("perplexity", {}).get("overall")
    err = p.get("output_error", {}).get("mean")
    ag = p.get("agreement", {})
    return c, ppl, err, ag, p["work"].get("kv_bytes_relative_to_dense")

mac = pieces.get("mac")
if mac:
    pol = mac["policies"]
    dense_ppl = pol[0].get("perplexity", {}).get("overall")
    w("### MAC: hit rate and skipped fraction by tau")
    w("")
    w("| policy | hit rate | skipped E[(p-r)+/m] | band+tail keys per hit | mac_dist p10 / p50 / p90 | qnorm | KV read vs dense | ppl (dense " + fmt(dense_ppl, "{:.3f}") + ") | output error (mean) | agreement: first divergence / edit sim. |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for p in pol:
        c, ppl, err, ag, kv = row(p)
        w(f"| `{p['policy']}` | {fmt(c.get('mac_hit_rate'))} | {fmt(c.get('mac_skipped'))} | {fmt(c.get('mac_band_keys'), '{:.0f}')} | "
          f"{fmt(c.get('mac_dist_p10'), '{:.2f}')} / {fmt(c.get('mac_dist_p50'), '{:.2f}')} / {fmt(c.get('mac_dist_p90'), '{:.2f}')} | "
          f"{fmt(c.get('mac_qnorm'), '{:.2f}')} | {fmt(kv)} | {fmt(ppl)} | {fmt(err, '{:.4f}')} | "
          f"{fmt(ag.get('first_divergence'), '{:.0f}')} / {fmt(ag.get('edit_similarity'), '{:.2f}')} |")
    w("")
    macs = [p for p in pol if p["policy"].startswith("mac")]
    if macs:
        layers = sorted({int(k.split(".L")[1]) for p in macs for k in p["counters"] if k.startswith("mac_hit_rate.L")})
        w("Per layer: hit rate / skipped fraction / median normalised distance / output error (mean).")
        w("")
        w("| layer | " + " | ".join(f"`{p['policy']}`" for p in macs) + " |")
        w("|---|" + "---|" * len(macs))
        for l in layers:
            cells = []
            for p in macs:
                c = p["counters"]
                errs = p.get("output_error", {}).get("layers", [])
                e = errs[l]["mean"] if l < len(errs) else None
                cells.append(f"{fmt(c.get(f'mac_hit_rate.L{l}'), '{:.2f}')} / {fmt(c.get(f'mac_skipped.L{l}'), '{:.2f}')} / "
                             f"{fmt(c.get(f'mac_dist_p50.L{l}'), '{:.2f}')} / {fmt(e, '{:.3f}')}")
            w(f"| {l} | " + " | ".join(cells) + " |")
        w("")

art = pieces.get("art")
if art:
    pol = art["policies"]
    w("### ART: visited fraction and output error")
    w("")
    w("`art` is dense+art; `art:order=recent` is the paper's most-recent-first order, `order=bound` the")
    w("descending Quest page bound of each query head. Block 64 tokens. Probe disagreement: traversals whose")
    w("stop block differs between the full-vector test and the 32-element strided probe / blocks classified")
    w("differently.")
    w("")
    w("| policy | visited fraction | early-stop rate | probe disagree: stops / blocks | KV read vs dense | ppl | output error (mean) | error layers 0-7 | agreement: first divergence / edit sim. |")
    w("|---|---|---|---|---|---|---|---|---|")
    for p in pol:
        c, ppl, err, ag, kv = row(p)
        errs = " ".join(f"{l['mean']:.3f}" for l in p.get("output_error", {}).get("layers", []))
        w(f"| `{p['policy']}` | {fmt(c.get('art_visited_fraction'))} | {fmt(c.get('art_early_stop_rate'))} | "
          f"{fmt(c.get('art_probe_stop_disagree'))} / {fmt(c.get('art_probe_block_disagree'), '{:.4f}')} | {fmt(kv)} | {fmt(ppl)} | "
          f"{fmt(err, '{:.4f}')} | {errs or '-'} | {fmt(ag.get('first_divergence'), '{:.0f}')} / {fmt(ag.get('edit_similarity'), '{:.2f}')} |")
    w("")

notes = f"{out}/mac-art-notes.md"
if os.path.exists(notes):
    L.extend(open(notes).read().rstrip("\n").split("\n"))
    w("")
w("<!-- mac-art:end -->")
section = "\n".join(L) + "\n"
old = open(md).read() if os.path.exists(md) else ""
b, e = old.find("<!-- mac-art:begin"), old.find("<!-- mac-art:end -->")
if b >= 0 and e >= 0:
    new = old[:b] + section + old[e + len("<!-- mac-art:end -->\n"):]
else:
    new = old + ("\n" if old and not old.endswith("\n") else "") + "\n" + section
open(md, "w").write(new)
print(f"mac_art_results: wrote the MAC/ART section of {md}")
