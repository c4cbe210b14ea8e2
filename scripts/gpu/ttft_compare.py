"""Aggregated vs disaggregated TTFT and greedy outputs, from two `tandem bench --output-json` reports.

Issue 7's goal: the TTFT of a disaggregated 2k-token request (prefill on GPU 0, decode on GPU 1, KV
moved between them) within 5% (or 1 ms) of the aggregated TTFT on one GPU, with identical greedy
outputs. Requests are matched by (item_id, turn); both runs used the same --seed, so the prompts
are the same. Prints one table and exits 1 when an output differs or a request failed.
"""
import argparse
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        rep = json.load(f)
    reqs = {}
    for run in rep["runs"]:
        for r in run["requests"]:
            reqs[(r["item_id"], r["turn"])] = r
    return reqs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("agg")
    ap.add_argument("disagg")
    ap.add_argument("--json", help="write the comparison here")
    a = ap.parse_args()
    agg, dis = load(a.agg), load(a.disagg)
    keys = sorted(set(agg) & set(dis))
    errors = [k for k in keys if agg[k]["error"] or dis[k]["error"]]
    ok = [k for k in keys if k not in errors]
    differ = [k for k in ok if agg[k].get("output_text") != dis[k].get("output_text")]
    ta = [agg[k]["ttft_ms"] for k in ok]
    td = [dis[k]["ttft_ms"] for k in ok]
    res = {"requests": len(keys), "errors": len(errors), "outputs_differ": len(differ)}
    if ta:
        for name, fn in (("mean", statistics.mean), ("p50", statistics.median)):
            x, y = fn(ta), fn(td)
            res[name] = {"agg_ms": x, "disagg_ms": y, "diff_ms": y - x, "ratio": y / x}
        res["goal_met"] = (res["mean"]["diff_ms"] <= max(1.0, 0.05 * res["mean"]["agg_ms"]))
    print("requests %d, errors %d, greedy outputs differing %d" % (len(keys), len(errors), len(differ)))
    prompt = [agg[k]["prompt_tokens"] for k in ok]
    if prompt:
        print("prompt tokens: %d..%d" % (min(prompt), max(prompt)))
    print("%-6s %12s %12s %10s %8s" % ("TTFT", "agg ms", "disagg ms", "diff ms", "ratio"))
    for name in ("mean", "p50"):
        if name in res:
            r = res[name]
            print("%-6s %12.2f %12.2f %10.2f %8.3f" % (name, r["agg_ms"], r["disagg_ms"], r["diff_ms"], r["ratio"]))
    if "goal_met" in res:
        print("goal (disagg mean within 5%% or 1 ms of agg): %s" % ("met" if res["goal_met"] else "NOT met"))
    for k in differ[:3]:
        print("differs %s: agg %r / disagg %r" % (k, agg[k]["output_text"][:80], dis[k]["output_text"][:80]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 1 if errors or differ else 0


if __name__ == "__main__":
    sys.exit(main())
