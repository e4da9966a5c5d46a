#!/usr/bin/env python3
"""CPU speed of skim vs Hugging Face transformers on the demo model, in the same run.

Measures, on this machine:
  - prefill tokens/s at --prefill-context tokens (default 4096),
  - decode tokens/s at each of --contexts (default 1024, 8192, 16384): a prompt of C tokens,
    then --decode-steps (default 32) greedy steps with the KV cache,
for skim (`build/skim generate ... --json`) and for transformers (torch on the CPU), both
with the same number of threads (--threads, default: all cores of this process's affinity).

transformers side: float32 weights and compute (the bf16 checkpoint upcast), for a
like-for-like comparison with skim's fp32 CPU backend; attention "sdpa" (HF's default,
its fastest CPU path; --hf-attn eager to change). Prefill: one timed forward over the
prompt after a small warm-up forward. Decode at context C: the C-token prompt is prefilled
(in chunks of --hf-chunk tokens, untimed), then --warmup untimed greedy steps, then N timed
greedy steps (manual loop with past_key_values, a perf_counter around each step; the
reported rate is N / sum of step times; the median step is recorded too).

skim side: runs `SKIM generate --model MODEL --prompt-file F --max-tokens N --ignore-eos
--threads T --ctx C+N+64 --json` and reads the last JSON line (prompt_tokens,
generated_tokens, prefill_tokens_per_s, decode_tokens_per_s, kv_bytes_per_step). The prompt
file holds the decoded text of exactly C held-out tokens; skim re-tokenizes it, so its
prompt_tokens may differ by a token or two: the real count is reported. If the binary is
absent (or --no-skim), the skim half is skipped and said so.

Prompt: held-out code (data/heldout-python/asyncio.py.txt then email.py.txt, as in
docs' attention measurements), tokenized with the model's tokenizer.json, cut to C tokens.

Writes bench/results/cpu_decode_<YYYYmmdd-HHMMSS>_<host>.json and .md (CPU model, thread
count, torch/transformers versions, all numbers).

Usage:
    python3 bench/cpu_decode_bench.py                      # defaults (16K takes minutes)
    python3 bench/cpu_decode_bench.py --contexts 1024 --decode-steps 8 --prefill-context 1024
    python3 bench/cpu_decode_bench.py --no-hf              # skim only
"""
import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HELDOUT = ["data/heldout-python/asyncio.py.txt", "data/heldout-python/email.py.txt",
           "data/heldout-python/idlelib.py.txt"]


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def default_threads():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def heldout_ids(tok, n):
    text = "".join(open(os.path.join(ROOT, p), encoding="utf-8").read() for p in HELDOUT)
    chars = n * 5
    while True:
        ids = tok.encode(text[:chars]).ids
        if len(ids) >= n + 8 or chars >= len(text):
            break
        chars = int(chars * 1.5)
    if len(ids) < n:
        sys.exit(f"held-out text has only {len(ids)} tokens, {n} asked")
    return ids[:n]


# ---------------------------------------------------------------- skim

def run_skim(args, tok, ids, max_tokens):
    text = tok.decode(ids)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    cmd = [args.skim, "generate", "--model", args.model, "--prompt-file", path,
           "--max-tokens", str(max_tokens), "--ignore-eos", "--threads", str(args.threads),
           "--ctx", str(len(ids) + max_tokens + 64), "--json"]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout}s", "cmd": " ".join(cmd)}
    finally:
        os.unlink(path)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr.strip()[-500:]}", "cmd": " ".join(cmd)}
    last = None
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                last = json.loads(line)
            except json.JSONDecodeError:
                pass
    if last is None:
        return {"error": "no JSON line in output", "cmd": " ".join(cmd),
                "stdout_tail": p.stdout[-500:]}
    keep = ("prompt_tokens", "generated_tokens", "finish_reason", "prefill_seconds",
            "decode_seconds", "prefill_tokens_per_s", "decode_tokens_per_s",
            "kv_bytes_per_step", "policy")
    r = {k: last[k] for k in keep if k in last}
    r["wall_seconds"] = round(wall, 3)
    r["prompt_tokens_asked"] = len(ids)
    return r


# ---------------------------------------------------------------- transformers

class HF:
    def __init__(self, args):
        import torch
        import transformers
        torch.set_num_threads(args.threads)
        self.torch = torch
        self.args = args
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.join(ROOT, args.model), dtype=torch.float32,
            attn_implementation=args.hf_attn).eval()
        cfg = self.model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        # fp32 cache: K and V, per layer and KV head, per token
        self.kv_bytes_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 4
        with torch.no_grad():  # warm-up: thread pool, allocator, kernels
            self.model(input_ids=torch.zeros((1, 64), dtype=torch.long))

    def prefill(self, ids):
        torch = self.torch
        x = torch.tensor([ids])
        with torch.no_grad():
            t0 = time.perf_counter()
            self.model(input_ids=x, use_cache=True)
            dt = time.perf_counter() - t0
        return {"prompt_tokens": len(ids), "prefill_seconds": round(dt, 4),
                "prefill_tokens_per_s": len(ids) / dt}

    def decode(self, ids, steps):
        torch = self.torch
        chunk = self.args.hf_chunk
        past = None
        t0 = time.perf_counter()
        with torch.no_grad():
            for s in range(0, len(ids), chunk):
                out = self.model(input_ids=torch.tensor([ids[s:s + chunk]]),
                                 past_key_values=past, use_cache=True)
                past = out.past_key_values
            t_prefill = time.perf_counter() - t0
            tok = int(out.logits[0, -1].argmax())
            times = []
            for i in range(self.args.warmup + steps):
                t1 = time.perf_counter()
                out = self.model(input_ids=torch.tensor([[tok]]), past_key_values=past,
                                 use_cache=True)
                past = out.past_key_values
                tok = int(out.logits[0, -1].argmax())
                if i >= self.args.warmup:
                    times.append(time.perf_counter() - t1)
        total = sum(times)
        ctx_mid = len(ids) + self.args.warmup + steps // 2
        return {"prompt_tokens": len(ids), "generated_tokens": steps,
                "untimed_prefill_seconds": round(t_prefill, 3),
                "prefill_chunk": chunk,
                "decode_seconds": round(total, 4),
                "decode_tokens_per_s": steps / total,
                "median_step_ms": round(1000 * statistics.median(times), 3),
                "kv_bytes_per_step": self.kv_bytes_per_token * ctx_mid}


# ---------------------------------------------------------------- report

def fmt(v, digits=1):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def markdown(res):
    m = res["machine"]
    lines = [
        f"# CPU decode benchmark: {res['model']}",
        "",
        f"{res['date']} on `{m['host']}`: {m['cpu_model']}, {m['cores_available']} cores available, "
        f"{res['threads']} threads for both. torch {m['torch']}, transformers {m['transformers']}"
        f" (float32, attention `{res['hf_attn']}`). skim: {res['skim_status']}. Load average "
        f"(1 min) {m['loadavg_1_5_15_before'][0]} before, {m['loadavg_1_5_15_after'][0]} after: "
        "other processes on the machine skew the numbers.",
        "",
        "| measure | context | skim tok/s | transformers tok/s | skim / HF | skim prompt tokens | skim KV bytes/step |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in res["rows"]:
        s, h = row.get("skim") or {}, row.get("hf") or {}
        key = "prefill_tokens_per_s" if row["measure"] == "prefill" else "decode_tokens_per_s"
        sv, hv = s.get(key), h.get(key)
        ratio = f"{sv / hv:.2f}x" if sv and hv else "-"
        if s.get("error"):
            sv_s = "error"
        else:
            sv_s = fmt(sv)
        kvb = s.get("kv_bytes_per_step") if row["measure"] == "decode" else None
        lines.append(f"| {row['measure']} | {row['context']} | {sv_s} | {fmt(hv)} | {ratio} | "
                     f"{s.get('prompt_tokens', '-')} | "
                     f"{f'{kvb / 1e6:.1f} MB' if kvb else '-'} |")
    lines += [
        "",
        f"Decode: {res['decode_steps']} timed greedy steps after a prompt of `context` tokens "
        f"(transformers: {res['warmup']} untimed warm-up steps first, rate = steps / summed "
        "step time; skim: its decode_tokens_per_s = (generated - 1) / decode time). Prefill: "
        "one forward over the prompt (skim in its own prefill chunks). Same prompt ids; skim "
        "re-tokenizes the decoded text, its real prompt length is in the table.",
    ]
    errs = [(r["measure"], r["context"], r["skim"]["error"]) for r in res["rows"]
            if r.get("skim") and r["skim"].get("error")]
    for meas, ctx, e in errs:
        lines.append(f"\nskim error ({meas} {ctx}): {e}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description="CPU prefill/decode speed: skim vs transformers")
    ap.add_argument("--model", default="models/demo-code-28m")
    ap.add_argument("--contexts", default="1024,8192,16384",
                    help="decode contexts, comma-separated tokens")
    ap.add_argument("--prefill-context", type=int, default=4096, help="0: skip prefill")
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=2, help="untimed decode steps (transformers)")
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--skim", default="build/skim", help="skim binary")
    ap.add_argument("--no-skim", action="store_true")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--hf-attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--hf-chunk", type=int, default=2048, help="untimed prefill chunk")
    ap.add_argument("--timeout", type=int, default=3600, help="per skim run, seconds")
    ap.add_argument("--out-dir", default="bench/results")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",") if c.strip()]

    import tokenizers
    tok = tokenizers.Tokenizer.from_file(os.path.join(ROOT, args.model, "tokenizer.json"))
    need = max(contexts + [args.prefill_context])
    all_ids = heldout_ids(tok, need)

    skim_bin = os.path.join(ROOT, args.skim) if not os.path.isabs(args.skim) else args.skim
    if args.no_skim:
        skim_status = "skipped (--no-skim)"
    elif not os.access(skim_bin, os.X_OK):
        skim_status = f"skipped ({args.skim} not found; build it with scripts/build.sh)"
    else:
        skim_status = f"`{args.skim}`"
        args.skim = skim_bin
    run_sk = skim_status.startswith("`")
    print(f"skim: {skim_status}", flush=True)

    import torch
    import transformers
    hf = None if args.no_hf else HF(args)
    if args.no_hf:
        print("transformers: skipped (--no-hf)", flush=True)

    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(f"warning: load average {load_before[0]:.2f} before the run: other processes "
              "compete for the cores and will slow both sides unevenly", flush=True)
    rows = []
    if args.prefill_context:
        ids = all_ids[:args.prefill_context]
        row = {"measure": "prefill", "context": len(ids)}
        if hf:
            row["hf"] = hf.prefill(ids)
            print(f"HF   prefill {len(ids)}: {row['hf']['prefill_tokens_per_s']:.1f} tok/s", flush=True)
        if run_sk:
            row["skim"] = run_skim(args, tok, ids, 1)
            print(f"skim prefill {len(ids)}: {row['skim']}", flush=True)
        rows.append(row)
    for c in contexts:
        ids = all_ids[:c]
        row = {"measure": "decode", "context": c}
        if hf:
            row["hf"] = hf.decode(ids, args.decode_steps)
            print(f"HF   decode @{c}: {row['hf']['decode_tokens_per_s']:.2f} tok/s "
                  f"(median step {row['hf']['median_step_ms']} ms)", flush=True)
        if run_sk:
            # +1: skim's first generated token comes from prefill, so N+1 gives N decode steps
            row["skim"] = run_skim(args, tok, ids, args.decode_steps + 1)
            print(f"skim decode @{c}: {row['skim']}", flush=True)
        rows.append(row)

    now = datetime.datetime.now()
    host = socket.gethostname()
    res = {
        "model": args.model,
        "date": now.strftime("%Y-%m-%d %H:%M:%S"),
        "threads": args.threads,
        "decode_steps": args.decode_steps,
        "warmup": args.warmup,
        "hf_attn": args.hf_attn,
        "hf_dtype": "float32",
        "skim_status": skim_status,
        "machine": {"host": host, "cpu_model": cpu_model(), "cores_available": default_threads(),
                    "cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "torch_threads": torch.get_num_threads(),
                    "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
                    "loadavg_1_5_15_after": [round(x, 2) for x in os.getloadavg()]},
        "rows": rows,
    }
    md = markdown(res)
    print()
    print(md)
    if not args.no_write:
        out = os.path.join(ROOT, args.out_dir)
        os.makedirs(out, exist_ok=True)
        safe_host = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in host)
        base = os.path.join(out, f"cpu_decode_{now.strftime('%Y%m%d-%H%M%S')}_{safe_host}")
        with open(base + ".json", "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        with open(base + ".md", "w") as f:
            f.write(md)
        print(f"wrote {os.path.relpath(base, ROOT)}.json and .md")


if __name__ == "__main__":
    main()
