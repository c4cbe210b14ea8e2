#!/usr/bin/env python3
"""HF transformers on the same shapes as cuda_engine_bench, in the same device call: the peer
numbers for the benchmark table (bench_table.py).

Model: random bf16 Qwen3-8B built on the GPU (qwen3_random.py; no checkpoint needed), sdpa
attention, eager (no torch.compile, no CUDA graphs), model.forward with a DynamicCache.
  prefill T: one sequence of T random ids, forward with use_cache=True and logits_to_keep=1 (only
             the last row's logits, as a server computes); one untimed run, then --repeats timed,
             median; synchronize before and after (host clock).
  decode B:  one sequence of --context random ids prefilled, its cache repeated B times along the
             batch (Cache.batch_repeat_interleave; or, where that is missing, the batch prefilled
             as B copies), then --warmup untimed and --steps timed forward calls of B new tokens
             (greedy), each synchronized; tok/s = B * steps / total time.
Writes --json for bench_table.py. Usage: hf_bench.py [--batches 1,8,64,256] [--context 1024]
  [--steps 32] [--warmup 2] [--prefill 512,2048,8192] [--repeats 3] [--json FILE] [--model 8b]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_random  # noqa: E402


def log(*a):
    print(*a, flush=True)


def forward(model, ids, **kw):
    """model(...) with logits for the last position only, whichever spelling this version has."""
    for key in ("logits_to_keep", "num_logits_to_keep", None):
        try:
            if key is None:
                return model(input_ids=ids, use_cache=True, **kw)
            return model(input_ids=ids, use_cache=True, **{key: 1}, **kw)
        except TypeError as e:
            if key is None or key not in str(e):
                raise
    raise AssertionError


def cache_batch(cache):
    layers = getattr(cache, "layers", None)
    if layers:
        return layers[0].keys.shape[0]
    return cache.key_cache[0].shape[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="8b", choices=sorted(qwen3_random.CONFIGS))
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prefill", default="512,2048,8192")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch
    import transformers
    t0 = time.time()
    model = qwen3_random.build(a.model)
    log("hf_bench: qwen3-%s built in %.1f s (torch %s, transformers %s, attn %s)" % (
        a.model, time.time() - t0, torch.__version__, transformers.__version__,
        getattr(model.config, "_attn_implementation", "?")))
    V = model.config.vocab_size
    gen = torch.Generator(device=qwen3_random.DEV).manual_seed(7)

    def rand_ids(b, t):
        return torch.randint(0, min(V, 151643), (b, t), device=qwen3_random.DEV, generator=gen)

    out = dict(tool="hf_bench", torch=torch.__version__, transformers=transformers.__version__,
               attn=str(getattr(model.config, "_attn_implementation", "?")), results=[], errors=[])
    with torch.no_grad():
        for T in [int(x) for x in a.prefill.split(",") if x]:
            times = []
            try:
                for r in range(-1, a.repeats):
                    ids = rand_ids(1, T)
                    qwen3_random.sync()
                    t0 = time.perf_counter()
                    o = forward(model, ids)
                    qwen3_random.sync()
                    dt = time.perf_counter() - t0
                    del o
                    if r >= 0:
                        times.append(dt)
            except Exception as e:  # noqa: BLE001 (an OOM or an API difference: report, go on)
                out["errors"].append("prefill %d: %r" % (T, e))
                log("prefill %d: ERROR %r" % (T, e))
                qwen3_random.empty_cache()
                continue
            med = statistics.median(times)
            log("HF prefill %5d tokens: %8.2f ms median of %d (min %.2f)" % (
                T, med * 1e3, len(times), min(times) * 1e3))
            out["results"].append(dict(kind="prefill", tokens=T, median_s=med, min_s=min(times),
                                       repeats=len(times)))
            qwen3_random.empty_cache()

        for B in [int(x) for x in a.batches.split(",") if x]:
            try:
                prompt = rand_ids(1, a.context)
                o = forward(model, prompt)
                cache = o.past_key_values
                how = "repeat"
                if B > 1:
                    try:
                        cache.batch_repeat_interleave(B)
                    except Exception as e:  # noqa: BLE001 (missing in this version, or failing)
                        log("batch_repeat_interleave(%d): %r; prefilling the batch instead" % (B, e))
                        del o, cache
                        qwen3_random.empty_cache()
                        how = "batch prefill"
                        o = forward(model, prompt.expand(B, -1).contiguous())
                        cache = o.past_key_values
                if cache_batch(cache) != B:
                    raise RuntimeError("cache batch %d != %d" % (cache_batch(cache), B))
                tok = o.logits[:, -1].argmax(-1, keepdim=True).expand(B, 1).contiguous()
                del o
                times = []
                for s in range(a.warmup + a.steps):
                    qwen3_random.sync()
                    t0 = time.perf_counter()
                    o = model(input_ids=tok, past_key_values=cache, use_cache=True)
                    cache = o.past_key_values
                    tok = o.logits[:, -1].argmax(-1, keepdim=True)
                    qwen3_random.sync()
                    dt = time.perf_counter() - t0
                    del o
                    if s >= a.warmup:
                        times.append(dt)
                del cache, tok
            except Exception as e:  # noqa: BLE001
                out["errors"].append("decode %d: %r" % (B, e))
                log("decode batch %d: ERROR %r" % (B, e))
                qwen3_random.empty_cache()
                continue
            total = sum(times)
            med = statistics.median(times)
            log("HF decode  batch %4d ctx %5d: %3d steps %8.2f ms/step median %10.1f tok/s (cache: %s)" % (
                B, a.context, len(times), med * 1e3, B * len(times) / total, how))
            out["results"].append(dict(kind="decode", batch=B, context=a.context, steps=len(times),
                                       total_s=total, median_step_s=med,
                                       tok_s=B * len(times) / total, cache=how))
            qwen3_random.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
