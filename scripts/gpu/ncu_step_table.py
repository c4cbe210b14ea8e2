#!/usr/bin/env python3
"""Per-kernel device time of one decode step, from Nsight Compute's CSV (issue 23).

Input: `ncu --csv --page raw --print-units base --metrics gpu__time_duration.sum ...` (nanoseconds)
over cuda_engine_bench at one decode batch size (gpu-check.sh stage ncu-step, with
--cache-control none: L2 keeps what the kernel before left, as in the step). ncu runs every kernel
alone (serialized), so the sum of a step's kernel times is the step without overlap between
kernels and without the gaps between them; set beside the graph step time of the bench stage it
says how much the step loses (or gains, with programmatic launch) between kernels.

The decode region starts after the last cuBLAS/CUTLASS kernel (the context's prefill; at m <= 8
decode runs no cuBLAS kernel); a step starts at its embedding kernel, and only whole steps count.
Output: one row per kernel (name and grid size, which tells the GEMV projections apart): launches
per step, microseconds per step, share; then the sum per step.
"""
import argparse
import csv
import re
import sys

CUBLAS = re.compile(r"gemm|cutlass|xmma|nvjet|cublas|splitk", re.I)


def short_name(name):
    """`void ns::(anonymous namespace)::GemvKernel<1, 4, bf16>(Params)` -> `GemvKernel<1, 4, bf16>`."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the argument list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith("(anonymous", i):
            cut = i
            break
    head = name[:cut].replace("(anonymous namespace)::", "")
    head = re.sub(r"^void ", "", head)
    base = head.split("<", 1)
    base[0] = base[0].rsplit("::", 1)[-1]
    text = "<".join(base)
    return text.replace("__nv_bfloat16", "bf16")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --csv --page raw output")
    ap.add_argument("--step-ms", type=float, default=0.0, help="the graph step time to set beside the sum")
    args = ap.parse_args()
    lines = open(args.csv, encoding="utf-8", errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit("ncu_step_table: no CSV header (\"ID\", ...) in " + args.csv)
    reader = csv.DictReader(lines[start:])
    rows = []
    for r in reader:
        dur = r.get("gpu__time_duration.sum", "")
        try:
            ns = float(dur.replace(",", ""))
        except ValueError:
            continue  # the units row
        rows.append((r.get("Kernel Name", "?"), r.get("Grid Size", "?"), ns))
    last_cublas = max((i for i, (n, _, _) in enumerate(rows) if CUBLAS.search(n)), default=-1)
    # Whole steps only: from the first embedding kernel after the prefill to the last one (the
    # launch count may cut the run inside a step).
    starts = [i for i in range(last_cublas + 1, len(rows)) if "EmbeddingKernel" in rows[i][0]]
    steps = len(starts) - 1
    if steps < 1:
        sys.exit(f"ncu_step_table: fewer than two decode steps after kernel {last_cublas} of {len(rows)}")
    decode = rows[starts[0]:starts[-1]]
    table = {}
    for n, grid, ns in decode:
        key = (short_name(n), grid)
        c, t = table.get(key, (0, 0.0))
        table[key] = (c + 1, t + ns)
    total = sum(t for _, t in table.values()) / steps
    print(f"ncu-step: {len(decode)} kernels in {steps} whole decode steps (after {starts[0]} other kernels);"
          " each kernel run alone, times per step")
    print(f"{'kernel':58} {'grid':>16} {'per step':>8} {'us/step':>9} {'share':>6}")
    for (name, grid), (c, t) in sorted(table.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:58]:58} {grid[:16]:>16} {c / steps:8.1f} {t / steps / 1e3:9.1f} {100 * t / steps / total:5.1f}%")
    line = f"sum of the step's kernel times: {total / 1e6:.3f} ms"
    if args.step_ms > 0:
        line += f"; the graph step {args.step_ms:.3f} ms: {args.step_ms - total / 1e6:+.3f} ms between kernels"
    print(line)


if __name__ == "__main__":
    main()
