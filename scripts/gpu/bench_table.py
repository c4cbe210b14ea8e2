#!/usr/bin/env python3
"""The benchmark table: tandem (cuda_engine_bench --json) beside HF transformers (hf_bench.py
--json) beside the roofline of each shape (DESIGN.md section 5: 4.27 TB/s copy bandwidth,
796 TFLOP/s bf16 GEMM, both measured on this machine kind).

Roofline of a shape = max(bytes / 4.27 TB/s, FLOPs / 796 TFLOP/s), with (Qwen3-8B: P = 7.568e9
parameters besides the embedding table, lm_head included; E = the 0.622e9 embedding table, of
which a step reads only its tokens' rows; L layers, H query heads, hd head_dim,
kv = 2 * L * kv_heads * hd * 2 bytes of bf16 KV per token = 147,456 B):
  decode, batch B, context c (the prompt length of the runs; the few tokens generated before and
  during the timed steps are left out): bytes = 2 P + B c kv; FLOPs = B (2 P + 4 c H hd L)
  prefill, T tokens (lm_head on the last row only): bytes = 2 P + T kv;
           FLOPs = 2 (P - V h) T + 2 V h + 2 T^2 H hd L (causal attention: QK^T and PV, half each)
Usage: bench_table.py --tandem T.json [--hf H.json] [--model 8b | --config config.json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_random  # noqa: E402

BW = 4.27e12
FLOPS = 796e12


def load(path):
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError:
        return None


def index(doc):
    d = {}
    for r in (doc or {}).get("results", []):
        if r["kind"] == "decode":
            d[("decode", r["batch"])] = r
        else:
            d[("prefill", r["tokens"])] = r
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem")
    ap.add_argument("--tandem-label", default="tandem")
    ap.add_argument("--tandem2", help="a second tandem run (e.g. TANDEM_CUDA_GRAPHS=0)")
    ap.add_argument("--tandem2-label", default="tandem (2)")
    ap.add_argument("--hf")
    ap.add_argument("--model", default="8b")
    ap.add_argument("--config")
    ap.add_argument("--context", type=int, default=1024)
    a = ap.parse_args()

    if a.config:
        cfg = json.load(open(a.config))
    else:
        cfg = dict(qwen3_random.COMMON, **qwen3_random.CONFIGS[a.model])
    P, E = qwen3_random.param_counts(cfg)
    L, H = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // H
    kv = 2 * L * cfg["num_key_value_heads"] * hd * 2
    Vh = cfg["vocab_size"] * cfg["hidden_size"]
    t, t2, hf = index(load(a.tandem)), index(load(a.tandem2)), index(load(a.hf))
    keys = sorted(set(t) | set(t2) | set(hf), key=lambda k: (k[0] != "decode", k[1]))
    if not keys:
        print("bench_table: no results (tandem %s, hf %s)" % (a.tandem, a.hf))
        return 1
    print("==== benchmark, Qwen3-8B shapes (random bf16 weights), one H200 ====")
    print("roofline = max(bytes / %.2f TB/s, FLOPs / %.0f TFLOP/s); weights read per step 2P = %.2f GB "
          "(P = %.3fe9 params besides the %.3fe9 embedding table); KV %d B/token" % (
              BW / 1e12, FLOPS / 1e12, 2 * P / 1e9, P / 1e9, E / 1e9, kv))
    cols = [a.tandem_label] + ([a.tandem2_label] if t2 else []) + ["HF"]
    head = "%-28s" % "shape" + "".join("%16s" % c for c in cols) + "%16s%12s%12s  %s" % (
        "roofline", "tandem %", "HF %", "bytes / FLOPs")
    print(head)
    print("-" * len(head))
    for k in keys:
        if k[0] == "decode":
            B = k[1]
            c = next((d[k]["context"] for d in (t, t2, hf) if k in d and "context" in d[k]), a.context)
            nbytes = 2 * P + B * c * kv
            flops = B * (2 * P + 4 * c * H * hd * L)
            roof_s = max(nbytes / BW, flops / FLOPS)
            roof = B / roof_s

            def fmt(r):
                return "%10.0f tok/s" % r["tok_s"] if r else "%16s" % "-"

            def pct(r):
                return "%11.1f%%" % (100 * r["tok_s"] / roof) if r else "%12s" % "-"
            shape = "decode B=%d ctx %d" % (B, c)
            roof_txt = "%10.0f tok/s" % roof
        else:
            T = k[1]
            nbytes = 2 * P + T * kv
            flops = 2 * (P - Vh) * T + 2 * Vh + 2 * T * T * H * hd * L
            roof_s = max(nbytes / BW, flops / FLOPS)

            def fmt(r):
                return "%13.2f ms" % (r["median_s"] * 1e3) if r else "%16s" % "-"

            def pct(r):
                return "%11.1f%%" % (100 * roof_s / r["median_s"]) if r else "%12s" % "-"
            shape = "prefill T=%d" % T
            roof_txt = "%13.2f ms" % (roof_s * 1e3)
        row = "%-28s" % shape + "%16s" % fmt(t.get(k)) + ("%16s" % fmt(t2.get(k)) if t2 else "")
        row += "%16s%16s" % (fmt(hf.get(k)), roof_txt) + pct(t.get(k)) + pct(hf.get(k))
        row += "  %.2f GB / %.2f TFLOP (%s-bound)" % (nbytes / 1e9, flops / 1e12,
                                                      "bandwidth" if nbytes / BW > flops / FLOPS else "compute")
        print(row)
    # The goals (issue 6), on the first tandem column.
    goals = [("decode B=1 <= 4.5 ms/token", ("decode", 1), lambda r: 1e3 / r["tok_s"], 4.5, "ms"),
             ("prefill 2k <= 70 ms", ("prefill", 2048), lambda r: r["median_s"] * 1e3, 70.0, "ms"),
             ("decode B=256 >= 10,000 tok/s", ("decode", 256), lambda r: -r["tok_s"], -10000.0,
              "tok/s")]
    line = []
    for label, k, val, limit, unit in goals:
        if k in t:
            v = val(t[k])
            line.append("%s: %s (%.1f %s)" % (label, "met" if v <= limit else "NOT met", abs(v), unit))
    if line:
        print("goals (%s): %s" % (a.tandem_label, "; ".join(line)))
    print("stronger peer (DESIGN.md section 5, not run here): HF static cache + torch.compile: decode "
          "B=1 8.6 ms/step (116 tok/s), B=64 1,906 tok/s; prefill 1024 + 1 step 48 ms")
    for name, doc in (("tandem", load(a.tandem)), ("HF", load(a.hf))):
        if doc and doc.get("errors"):
            print("%s errors: %s" % (name, doc["errors"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
