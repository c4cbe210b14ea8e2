#!/usr/bin/env python3
"""The last step of scripts/planner-load-test.sh: the planner and fixed graphs side by side.

Reads OUT/planner.json and OUT/fixed.json (`tandem bench --phases --output-json` reports) and
OUT/<mode>-serve.log (`tandem serve`'s log), prints per phase and graph: SLO met % (requests sent in
the phase that met the TTFT and ITL SLO), ok / failed requests, TTFT and ITL p50 / p99 (ms),
replicas; then the scale events (the planner's decisions as scraped from its /metrics, and the
worker processes' start, ready, drain and stop from serve's log), each with its time from the
start of the phased run; then the issue's done-when checks:
  - the planner meets the SLO in more of each phase than the fixed graph (a phase where both meet
    it for every request is printed as a tie and does not count as met: that phase did not load
    the fixed graph past its SLO),
  - it scales each pool in the right direction within two intervals of a phase change
    (phase 1: prefill up; phase 2: prefill down, decode up; phase 3: decode down),
  - no request fails (in particular none during a scale-up or scale-down).
Usage: planner_load_table.py --out OUT --interval SECONDS
"""
import argparse
import datetime
import json
import os
import re
import sys

ROLES = ("prefill", "decode")
KEY = "tandem_planner_desired_replicas{role=%s}"
# phase index -> {role: +1 up / -1 down}: the load test's three phases
EXPECTED = {0: {"prefill": +1}, 1: {"prefill": -1, "decode": +1}, 2: {"decode": -1}}
LOG_EVENT = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+) \w+ (?:"
    r"(?P<replicas>graph '[^']*': (?:prefill|decode) replicas \d+ -> \d+)|"
    r"(?P<worker>(?:prefill|decode)-\d+: (?:ready|draining for a scale-down|drained and stopped|restarting)[^(]*))")


def load(out, mode):
    with open(os.path.join(out, mode + ".json")) as f:
        return json.load(f)


def log_events(out, mode, start_unix_s):
    """(seconds from the run's start, text) of serve's scale lines; empty when no log."""
    events = []
    path = os.path.join(out, mode + "-serve.log")
    if not os.path.exists(path):
        return events
    for line in open(path, errors="replace"):
        m = LOG_EVENT.match(line)
        if not m:
            continue
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").timestamp()
        events.append((t - start_unix_s, (m.group("replicas") or m.group("worker")).strip()))
    return events


def scrape_events(report):
    """(t_s, role, from, to) where the planner's desired replicas changed. The gauges appear with
    the planner's first decision: before it, the graph's starting 1 prefill + 1 decode."""
    events, last = [], {role: 1 for role in ROLES}
    for s in report.get("scrapes", []):
        for role in ROLES:
            v = s["values"].get(KEY % role)
            if v is None:
                continue
            if role in last and v != last[role]:
                events.append((s["t_s"], role, last[role], v))
            last[role] = v
    return events


def replicas_text(phase, fixed):
    if fixed:
        return "P 1, D 1"
    parts = []
    for role in ROLES:
        r = phase["range"].get(KEY % role)
        if r is None:
            parts.append("%s ?" % role[0].upper())
        else:
            lo, hi = int(r[0]), int(r[1])
            parts.append("%s %s" % (role[0].upper(), lo if lo == hi else "%d..%d" % (lo, hi)))
    return ", ".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, required=True)
    args = ap.parse_args()
    reports = {m: load(args.out, m) for m in ("planner", "fixed")}
    phases = {m: r["phases"] for m, r in reports.items()}
    slo = reports["planner"]["config"]["slo"]
    print("\n## Planner vs fixed 1P1D, SLO %s, planner interval %g s\n" % (slo, args.interval))
    print("| phase | graph | sent | ok | failed | SLO met % | TTFT p50 / p99 ms | ITL p50 / p99 ms | replicas |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for i, p in enumerate(phases["planner"]):
        for mode in ("planner", "fixed"):
            q = phases[mode][i]
            s = q["summary"]
            print("| %s (%g s, %g req/s, %s/%s tok) | %s | %d | %d | %d | %.1f | %.0f / %.0f | %.0f / %.0f | %s |" % (
                q["name"], q["duration_s"], q["rate"], q["input_len"], q["output_len"], mode,
                s["num_requests"], s["num_ok"], s["num_errors"], q["slo_met_pct"],
                s["ttft_ms"]["p50"], s["ttft_ms"]["p99"], s["itl_ms"]["p50"], s["itl_ms"]["p99"],
                replicas_text(q, mode == "fixed")))
    starts = [p["start_s"] for p in phases["planner"]]
    names = [p["name"] for p in phases["planner"]]

    def where(t):
        i = max([k for k, s in enumerate(starts) if s <= t] or [0])
        return "%s +%.1f s" % (names[i], t - starts[i])

    events = scrape_events(reports["planner"])
    print("\nPlanner decisions (desired replicas, scraped every second):")
    for t, role, a, b in events:
        print("  %7.1f s (%s): %s %d -> %d" % (t, where(t), role, a, b))
    if not events:
        print("  none")
    for mode in ("planner", "fixed"):
        lines = [e for e in log_events(args.out, mode, reports[mode]["start_unix_s"]) if e[0] >= -5]
        print("\n%s graph, worker processes (tandem serve's log):" % mode)
        for t, text in lines:
            print("  %7.1f s (%s): %s" % (t, where(max(t, 0)), text))
        if not lines:
            print("  no scale events")
    failed = {}
    for mode, r in reports.items():
        failed[mode] = [q for q in r["runs"][0]["requests"] if q["error"]]
        print("\n%s: %d failed request(s)%s" % (mode, len(failed[mode]), "".join(
            "\n  sent at %.1f s (%s): %s %s" % (q["start_s"], where(q["start_s"]), q["error"],
                                               q["error_message"][:120]) for q in failed[mode][:10])))

    print("\n## Done-when checks")
    ok_all, ties = True, []
    for i, p in enumerate(phases["planner"]):
        a, b = p["slo_met_pct"], phases["fixed"][i]["slo_met_pct"]
        ok = a > b
        if not ok and a == b == 100:
            ties.append(p["name"])  # nothing can be more than every request
        ok_all &= ok
        print("- %s: planner meets the SLO in %.1f %% of its requests, fixed %.1f %%: %s" % (
            p["name"], a, b, "yes" if ok else "tie (both 100 %)" if p["name"] in ties else "NO"))
    for i, want in EXPECTED.items():
        if i >= len(starts):
            continue
        lo, hi = starts[i], starts[i] + 2 * args.interval
        for role, sign in want.items():
            hits = [e for e in events if e[1] == role and lo <= e[0] <= hi and (e[3] - e[2]) * sign > 0]
            ok = bool(hits)
            ok_all &= ok
            first = [e for e in events if e[1] == role and e[0] >= lo and (e[3] - e[2]) * sign > 0]
            print("- %s: %s %s within %g s of the change: %s" % (
                names[i], role, "up" if sign > 0 else "down", 2 * args.interval,
                ("yes, at +%.1f s" % (hits[0][0] - lo)) if ok else
                ("NO (first at +%.1f s)" % (first[0][0] - lo) if first else "NO (never)")))
    ok = not failed["planner"]
    ok_all &= ok
    print("- no failed request with the planner (scale-ups and scale-downs included): %s" % ("yes" if ok else "NO"))
    print("\nall done-when checks met: %s%s" % ("yes" if ok_all else "NO", "" if not ties else
          " (ties at 100 %% in %s: the fixed graph met the SLO for every request there too; a tie "
          "is not more)" % ", ".join(ties)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
