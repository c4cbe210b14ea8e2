#!/usr/bin/env python3
"""Sums an Nsight Compute source-page CSV (ncu --page source --print-source sass --csv, one kernel)
by warp-stall reason and by SASS opcode: what the warps stalled on, and what the kernel spent its
issue slots on (share of executed warp-instructions beside share of stall samples).
scripts/gpu-check.sh's ncu-prefill stage writes such a CSV with GPU_CHECK_NCU_PREFILL_SOURCE=1.

  ncu_source_table.py FILE.csv
"""
import collections
import csv
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def main():
    lines = open(sys.argv[1]).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    table = list(csv.reader(lines[start:]))
    header = table[0]
    col = {name: i for i, name in enumerate(header)}
    seen, rows = set(), []
    for row in table[1:]:  # one row per SASS instruction (a second copy of the page is skipped)
        if len(row) == len(header) and row[0].startswith("0x") and row[0] not in seen:
            seen.add(row[0])
            rows.append(row)
    total = sum(int(r[col[SAMPLES]]) for r in rows) or 1
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    by_reason = {s: sum(int(r[col[s]] or 0) for r in rows) for s in reasons}
    print(f"warp-stall samples {total}; by reason:")
    for name, n in sorted(by_reason.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {name:22s} {100 * n / total:5.1f}%")
    executed, stalled = collections.Counter(), collections.Counter()
    for r in rows:
        text = r[1].strip()
        op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0] if text else "?"
        executed[op] += int(r[col[EXECUTED]] or 0)
        stalled[op] += int(r[col[SAMPLES]])
    n_exec = sum(executed.values()) or 1
    print(f"warp-instructions executed {n_exec}; by opcode (share of executed / of stall samples):")
    for op, n in executed.most_common(14):
        print(f"  {op:8s} {100 * n / n_exec:5.1f}% / {100 * stalled[op] / total:5.1f}%")


if __name__ == "__main__":
    main()
