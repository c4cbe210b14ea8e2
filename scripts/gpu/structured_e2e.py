#!/usr/bin/env python3
"""Structured outputs through a running tandem server (issue 24, scripts/gpu-e2e.sh structured):

  suite       every schema of tests/grammar/schemas.json x --seeds, as response_format json_schema
              chat completions at temperature 1 (--concurrency at once); writes OUTPUTS.jsonl
              ({"name", "output", "finish_reason"} per line) and OUTPUTS-stop.jsonl (those that
              finished: the input of tests/tools/validate_json.py and validate_ajv.mjs, run on the
              dev machine, as the device has no ajv); prints how many finished (stop) and how
              many ran to max_tokens (cut, so not expected to validate).
  throughput  --batch concurrent completions of --output-len tokens each (ignore_eos), without a
              constraint and with a regex that never completes (a list of numbers), interleaved
              twice; prints output tok/s of each and the ratio.

Standard library only (the device has no extra packages). Exit 1 when a request fails.
"""
import argparse
import concurrent.futures as cf
import json
import sys
import time
import urllib.request


def post(base, body, timeout=600):  # the server's one model (no "model" field)
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def suite(args):
    with open(args.schemas, encoding="utf-8") as f:
        cases = json.load(f)
    jobs = []
    for c in cases:
        for seed in range(args.seeds):
            jobs.append((c["name"], {
                "temperature": 1.0, "seed": 1000 + seed, "max_tokens": args.max_tokens,
                "messages": [{"role": "user", "content": "Give an example value for: " + c["name"]}],
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "case", "schema": c["schema"]}}}))
    failed = 0
    t0 = time.time()
    finished_path = args.out.replace(".jsonl", "") + "-stop.jsonl"  # the ones that finished
    with open(args.out, "w", encoding="utf-8") as out, open(finished_path, "w", encoding="utf-8") as fin, \
            cf.ThreadPoolExecutor(args.concurrency) as pool:
        futures = {pool.submit(post, args.base, body): name for name, body in jobs}
        counts = {}
        for fut in cf.as_completed(futures):
            name = futures[fut]
            try:
                choice = fut.result()["choices"][0]
            except Exception as e:  # noqa: BLE001 - counted and printed
                failed += 1
                print(f"{name}: request failed: {e}")
                continue
            reason = choice.get("finish_reason")
            counts[reason] = counts.get(reason, 0) + 1
            line = json.dumps({"name": name, "output": choice["message"]["content"],
                               "finish_reason": reason}) + "\n"
            out.write(line)
            if reason == "stop":
                fin.write(line)
    print(f"suite: {len(jobs)} requests ({len(cases)} schemas x {args.seeds} seeds) in "
          f"{time.time() - t0:.1f} s; finish reasons {counts}; failed {failed}")
    return failed == 0


def throughput(args):
    def one(schema, i):
        body = {"temperature": 1.0, "seed": i, "max_tokens": args.output_len,
                "ignore_eos": True, "messages": [{"role": "user", "content": f"Count to a thousand ({i})."}]}
        if schema:
            # A grammar that can always go on (a JSON array of integers would close early: a
            # complete grammar ends the request even with ignore_eos), so both runs make
            # --output-len tokens a request.
            body["guided_regex"] = "[0-9]{1,6}(, [0-9]{1,6})*"
        return post(args.base, body)["usage"]["completion_tokens"]

    def run(schema):
        t0 = time.time()
        with cf.ThreadPoolExecutor(args.batch) as pool:
            tokens = sum(pool.map(lambda i: one(schema, i), range(args.batch)))
        return tokens, time.time() - t0

    run(False)  # warm-up (graphs, allocations)
    rows = []
    for rep in range(2):
        for schema in (False, True):
            tokens, secs = run(schema)
            rows.append((rep, schema, tokens, secs))
            print(f"throughput run {rep + 1} {'schema' if schema else 'free  '}: {tokens} tokens in "
                  f"{secs:.2f} s = {tokens / secs:.0f} tok/s")
    if any(t != args.batch * args.output_len for _, _, t, _ in rows):
        print("throughput: a run made fewer tokens than batch x output-len (see above)")
    free = sum(t for _, s, t, _ in rows if not s) / sum(d for _, s, _, d in rows if not s)
    sch = sum(t for _, s, t, _ in rows if s) / sum(d for _, s, _, d in rows if s)
    print(f"throughput at batch {args.batch}, {args.output_len} tokens each: free {free:.0f} tok/s, "
          f"schema {sch:.0f} tok/s, ratio {sch / free:.1%} (issue 24's goal >= 95%)")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["suite", "throughput"])
    ap.add_argument("--base", default="http://127.0.0.1:18000")
    ap.add_argument("--schemas", default="tests/grammar/schemas.json")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--out", default="structured-outputs.jsonl")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=256)
    args = ap.parse_args()
    ok = suite(args) if args.what == "suite" else throughput(args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
