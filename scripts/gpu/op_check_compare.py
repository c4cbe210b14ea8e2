#!/usr/bin/env python3
"""Timed cuda_op_check rows of this build beside an earlier build's, from one call of
scripts/gpu-check.sh (GPU_CHECK_OPS_BASE): this build, the base, this build again.

Usage: op_check_compare.py NEW.log BASE.log [NEW2.log]
Prints one line per timed row present in both: microseconds of each run, the throughput column
(GB/s or TFLOP/s) and base / mean(new) (> 1: this build is faster). Rows that failed parity in any
log are marked FAIL."""
import re
import sys

ROW = re.compile(r"^(ok|FAIL)\s+(\S+)\s+(.*?)\s+rel\s.*?tol\s+\S+\s+([\d.]+) us\s+([\d.]+ (?:GB/s|TFLOP/s))")


def rows(path):
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = ROW.match(line)
            if m:
                key = m.group(2) + " " + re.sub(r"\s+", " ", m.group(3))
                out.setdefault(key, (m.group(1), float(m.group(4)), m.group(5)))
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    new, base = rows(argv[1]), rows(argv[2])
    new2 = rows(argv[3]) if len(argv) > 3 else {}
    print("==== cuda_op_check, this build beside the base (same call): us (throughput) ====")
    print(f"{'row':<72} {'new':>18} {'base':>18} {'new again':>18} {'base/new':>8}")
    for key, (status, us, thr) in new.items():
        if key not in base:
            continue
        bstatus, bus, bthr = base[key]
        n2 = new2.get(key)
        mean_new = (us + n2[1]) / 2 if n2 else us
        flag = "" if status == bstatus == "ok" and (not n2 or n2[0] == "ok") else "  FAIL"
        again = f"{n2[1]:.1f} ({n2[2]})" if n2 else "-"
        print(f"{key[:72]:<72} {us:>7.1f} ({thr:>9}) {bus:>7.1f} ({bthr:>9}) {again:>18} "
              f"{bus / mean_new:>8.3f}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
