#!/usr/bin/env python3
"""The bundled tiny model through tandem's CUDA runner against the golden files (Hugging Face's
greedy ids and first-step top-5 log-probabilities, tests/golden/tiny-qwen3*.json).

Runs cuda_peer_dump (--cpu: the CPU runner, for trying this out without a GPU) on every golden
prompt for as many greedy steps as the golden has, then per case: tokens equal, or the first
divergent step and tandem's own margin there between its token and the golden one. A divergence
is called a near-tie when that margin is within 6e-2 x the RMS of the logits row (twice the
3e-2 relative tolerance cuda_runner_check allows a bf16 runner, on the per-logit scale); HF's
margins are known only for the first step (top-5), which is used when the divergence is there.
Also the max |logprob error| over the first step's golden top-5.
Exit 0 when every case matches or diverges at a near-tie, 1 otherwise, 2 on an error.

Usage: golden_check.py --dump BIN --model DIR GOLDEN.json [GOLDEN.json ...] [--cpu] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

NEAR_TIE_RMS = 6e-2


def log_softmax(row):
    m = row.max()
    return row - (m + np.log(np.exp(row - m).sum()))


def cases_of(path):
    d = json.load(open(path))
    for key in ("generation", "generation_long"):
        for g in d.get(key, []):
            yield os.path.basename(path), g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("golden", nargs="+")
    ap.add_argument("--dump", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()

    cases = [c for path in a.golden for c in cases_of(path)]
    steps = max(len(g["greedy_ids"]) for _, g in cases)
    work = tempfile.mkdtemp(prefix="tandem-golden-")
    with open(os.path.join(work, "ids.txt"), "w") as f:
        for _, g in cases:
            f.write(" ".join(map(str, g["prompt_ids"])) + "\n")
    cmd = [a.dump, a.model, "--ids", os.path.join(work, "ids.txt"), "--out", work,
           "--steps", str(steps)] + (["--cpu"] if a.cpu else [])
    print("$ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if rc != 0:
        print("cuda_peer_dump exit %d" % rc)
        return 2
    V = json.load(open(os.path.join(work, "meta.json")))["vocab"]
    bad, exact, ties, worst_lp, results = 0, 0, 0, 0.0, []
    for i, (src, g) in enumerate(cases):
        rows = np.fromfile(os.path.join(work, "p%d.steps.f32" % i), dtype=np.float32).reshape(-1, V)
        got = [int(x) for x in open(os.path.join(work, "p%d.tokens.txt" % i)).read().split()]
        want = g["greedy_ids"]
        n = len(want)
        lp0 = log_softmax(rows[0].astype(np.float64))
        lp_err = max(abs(lp0[t] - v) for t, v in g["top5_first"])
        worst_lp = max(worst_lp, lp_err)
        div = next((k for k in range(n) if got[k] != want[k]), None)
        r = dict(source=src, prompt_len=len(g["prompt_ids"]), first_divergence=div,
                 top5_logprob_err=lp_err)
        status = "equal"
        if div is None:
            exact += 1
        else:
            row = rows[div].astype(np.float64)
            margin = float(row[got[div]] - row[want[div]])
            rms = float(np.sqrt((row ** 2).mean()))
            near = margin <= NEAR_TIE_RMS * rms
            if div == 0:  # HF's own margin, when the golden top-5 has tandem's token
                top = dict((t, v) for t, v in g["top5_first"])
                if got[0] in top:
                    r["hf_margin"] = top[want[0]] - top[got[0]]
                    err = abs(lp0[got[0]] - top[got[0]]) + abs(lp0[want[0]] - top[want[0]])
                    near = near or r["hf_margin"] <= err
            r.update(tandem_margin=margin, row_rms=rms, near_tie=near)
            status = ("diverges at step %d of %d (golden %d, tandem %d; tandem margin %.4f, "
                      "row rms %.3f): %s" % (div, n, want[div], got[div], margin, rms,
                                             "near-tie" if near else "NOT a near-tie"))
            ties += near
            bad += not near
        results.append(r)
        print("%-4s %-22s case %d (prompt %4d tokens): %s; top-5 logprob err %.2e" % (
            "ok" if div is None or r.get("near_tie") else "FAIL", src, i, len(g["prompt_ids"]),
            status, lp_err), flush=True)
    print("golden (%s runner): %d cases, %d equal, %d near-tie divergences, %d failures; "
          "max |top-5 logprob error| %.2e" % ("cpu" if a.cpu else "cuda", len(cases), exact, ties,
                                             bad, worst_lp))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(cases=results, equal=exact, near_ties=ties, failures=bad,
                           max_top5_logprob_err=worst_lp), f)
    for name in os.listdir(work):
        os.remove(os.path.join(work, name))
    os.rmdir(work)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
