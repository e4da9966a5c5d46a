#!/usr/bin/env python3
"""Load test of a running `skim serve`: C concurrent clients each stream R completions
(greedy, ignore_eos, fixed lengths) and the script reports throughput (generated tokens/s
over the wall time), time to first token and time between tokens, per concurrency level.
With --policy-mix, client c asks for the c-th policy of the list (round robin) in each
request's `policy` field: a mixed-policy load, which a GPU server decodes in one batch.
Standard library only, so it runs on any machine the server runs on.

    python3 bench/serve_bench.py --url http://127.0.0.1:8080 --concurrency 1,4,8 \
        --requests 2 --prompt-tokens 512 --max-tokens 64 [--json out.json] \
        [--policy-mix "dense;quest:budget=0.1,min=0;gbsa:keep=0.1"]
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request


def stream_one(url, prompt_ids, max_tokens, policy=None):
    body = {"prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    if policy:
        body["policy"] = policy
    body = json.dumps(body).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    times, usage = [], None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            if chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.perf_counter() - t0)
            usage = chunk.get("usage", usage)
    if usage is None:
        raise RuntimeError("the stream carried no usage chunk")
    return times, usage["completion_tokens"]


def level(url, concurrency, requests, prompt_tokens, max_tokens, policies):
    results, errors = [], []

    def client(c):
        for r in range(requests):
            # Distinct prompts (no two clients share a prefix), token ids in a safe range.
            ids = [100 + (c * 7919 + r * 104729 + i * 31) % 5000 for i in range(prompt_tokens)]
            try:
                results.append(stream_one(url, ids, max_tokens, policies[c % len(policies)] if policies else None))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(n for _, n in results)
    ttft = [t[0] for t, _ in results if t]
    gaps = [b - a for t, _ in results for a, b in zip(t, t[1:])]
    return {"concurrency": concurrency, "requests": len(results), "errors": errors,
            "generated_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall if wall else 0,
            "ttft_ms_median": 1e3 * statistics.median(ttft) if ttft else None,
            "inter_token_ms_median": 1e3 * statistics.median(gaps) if gaps else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--requests", type=int, default=2, help="per client")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--json")
    ap.add_argument("--policy-mix", default="", help="policies separated by ';', one per client in turn")
    a = ap.parse_args()
    policies = [p for p in a.policy_mix.split(";") if p]
    with urllib.request.urlopen(a.url + "/v1/models") as r:
        model = json.load(r)["data"][0]
    out = {"model": model, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens,
           "policy_mix": policies, "levels": []}
    print(f"{'conc':>5} {'reqs':>5} {'tok/s':>9} {'TTFT ms':>9} {'ITL ms':>8}")
    for c in [int(x) for x in a.concurrency.split(",")]:
        r = level(a.url, c, a.requests, a.prompt_tokens, a.max_tokens, policies)
        out["levels"].append(r)
        print(f"{c:>5} {r['requests']:>5} {r['tokens_per_s']:>9.1f} {r['ttft_ms_median'] or 0:>9.1f} "
              f"{r['inter_token_ms_median'] or 0:>8.2f}" + (f"  ERRORS: {r['errors'][:2]}" if r["errors"] else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if any(r["errors"] for r in out["levels"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
