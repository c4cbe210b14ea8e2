#!/usr/bin/env python3
"""Golden prompts through a running tandem server (scripts/gpu-e2e.sh, on the GPU machine).

Sends every prompt of the golden files (Hugging Face's greedy outputs for the bundled tiny model:
tiny-qwen3.json "generation", tiny-qwen3-long.json "generation_long") as token ids to
/v1/completions (temperature 0, max_tokens = the golden length, ignore nothing) and compares the
text with HF's greedy_text; also one chat completion and one streamed completion. Writes a JSON
record; --summarize prints the table of several records. Standard library only (the device machine
installs nothing). Exit 1 when the server does not come up or a request fails; text mismatches are
reported, not fatal (bf16 on the GPU vs HF's float32 on the CPU may part at near-ties: the record
keeps HF's top-5 logprobs of the first token for judging that).
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


def post(url, body, timeout=300):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read().decode()
    return raw, time.perf_counter() - t0


def wait_healthy(base, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(1)
    return False


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run(args):
    rec = {"mode": args.mode, "prompts": [], "ok": True}
    if not wait_healthy(args.base, args.health_timeout):
        print(f"{args.mode}: server not healthy after {args.health_timeout} s", file=sys.stderr)
        rec["ok"] = False
        json.dump(rec, open(args.out, "w"), indent=1)
        return 1
    gen = json.load(open(os.path.join(args.golden, "tiny-qwen3.json")))["generation"]
    long_path = os.path.join(args.golden, "tiny-qwen3-long.json")
    items = [("short", g) for g in gen]
    if os.path.exists(long_path):
        long_items = json.load(open(long_path))["generation_long"]
        items += [("long", g) for g in long_items]
        # --repeat-long: the long prompts once more, after the others: with a small KV pool the
        # later ones evicted their blocks, so these come back from a KV tier (--kv-offload-host-gib).
        if args.repeat_long:
            items += [("long-again", g) for g in long_items]
    rc = 0
    for kind, g in items:
        body = {"prompt": g["prompt_ids"], "max_tokens": len(g["greedy_ids"]), "temperature": 0}
        try:
            raw, secs = post(args.base + "/v1/completions", body)
            text = json.loads(raw)["choices"][0]["text"]
        except Exception as e:  # an HTTP error or a bad body fails the run
            print(f"{args.mode} {kind}: request failed: {e}", file=sys.stderr)
            rec["ok"] = False
            rc = 1
            continue
        d = first_diff(text, g["greedy_text"])
        rec["prompts"].append({"kind": kind, "prompt_tokens": len(g["prompt_ids"]),
                               "match": d is None, "first_diff_char": d, "seconds": round(secs, 4),
                               "text": text, "golden": g["greedy_text"],
                               "hf_top5_first": g.get("top5_first")})
    # One chat completion and one streamed completion: the OpenAI paths on the GPU.
    try:
        raw, _ = post(args.base + "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
                       "temperature": 0})
        rec["chat_ok"] = bool(json.loads(raw)["choices"][0]["message"]["content"] is not None)
        raw, _ = post(args.base + "/v1/completions",
                      {"prompt": gen[0]["prompt_ids"], "max_tokens": len(gen[0]["greedy_ids"]),
                       "temperature": 0, "stream": True})
        text = "".join(json.loads(line[6:])["choices"][0]["text"] for line in raw.splitlines()
                       if line.startswith("data: {"))
        rec["stream_matches_nonstream"] = text == rec["prompts"][0]["text"]
    except Exception as e:
        print(f"{args.mode}: chat/stream failed: {e}", file=sys.stderr)
        rec["ok"] = False
        rc = 1
    json.dump(rec, open(args.out, "w"), indent=1)
    n = len(rec["prompts"])
    m = sum(p["match"] for p in rec["prompts"])
    print(f"{args.mode}: {m}/{n} golden texts equal")
    for p in rec["prompts"]:
        if not p["match"]:
            print(f"  {p['kind']} ({p['prompt_tokens']} tokens) parts at char {p['first_diff_char']}:"
                  f"\n    tandem {p['text'][:100]!r}\n    hf     {p['golden'][:100]!r}")
    return rc


def summarize(paths):
    print(f"{'mode':8} {'golden equal':>12} {'chat':>5} {'stream=':>7} {'p50 s':>7}")
    for path in paths:
        rec = json.load(open(path))
        ps = rec.get("prompts", [])
        secs = sorted(p["seconds"] for p in ps) or [float("nan")]
        print(f"{rec['mode']:8} {sum(p['match'] for p in ps):>5}/{len(ps):<6} "
              f"{str(rec.get('chat_ok', '-')):>5} {str(rec.get('stream_matches_nonstream', '-')):>7} "
              f"{secs[len(secs) // 2]:7.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--mode", default="agg")
    ap.add_argument("--golden")
    ap.add_argument("--out")
    ap.add_argument("--health-timeout", type=float, default=240)
    ap.add_argument("--summarize", nargs="*")
    ap.add_argument("--repeat-long", action="store_true")
    a = ap.parse_args()
    if a.summarize is not None:
        summarize(a.summarize)
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
