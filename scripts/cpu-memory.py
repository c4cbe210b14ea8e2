#!/usr/bin/env python3
"""Resident memory of `tandem generate --device cpu` on the bundled model (issue 29).

Runs the command ROUNDS times and prints its maximum resident set size (the kernel's ru_maxrss from
wait4, the number /usr/bin/time -v prints) beside 1.3x the checkpoint's size (the goal), then the
breakdown of the largest sample of /proc/<pid>/smaps taken every few milliseconds during the last
run: the checkpoint's mapping, the heap, other anonymous memory (thread stacks, the KV pages,
activations), the tandem binary, the shared libraries (their sum and the largest), and whether any
cuBLAS library was mapped.

  scripts/cpu-memory.py [--tandem build/tandem] [--max-tokens 32] [--rounds 5] [--libs 12]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def smaps_sample(pid):
    """{group: rss kB} of one /proc/<pid>/smaps read, or None once the process is gone."""
    groups = {}
    name = None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    parts = line.split()
                    name = parts[5] if len(parts) > 5 else "[anon]"
                elif line.startswith("Rss:"):
                    groups[name] = groups.get(name, 0) + int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return groups or None


def categorize(groups, checkpoint):
    cats = {"checkpoint": 0, "heap": 0, "anon": 0, "binary": 0, "libs": 0, "other": 0}
    libs = {}
    for name, kb in groups.items():
        base = os.path.basename(name)
        if os.path.realpath(name) == os.path.realpath(checkpoint):
            cats["checkpoint"] += kb
        elif name == "[heap]":
            cats["heap"] += kb
        elif name in ("[anon]", "[stack]") or name.startswith("[anon:"):
            cats["anon"] += kb
        elif base == "tandem":
            cats["binary"] += kb
        elif ".so" in base:
            key = re.sub(r"\.so.*", "", base)
            libs[key] = libs.get(key, 0) + kb
            cats["libs"] += kb
        else:
            cats["other"] += kb
    return cats, libs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tandem", default=os.path.join(ROOT, "build", "tandem"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "tiny-qwen3"))
    ap.add_argument("--prompt", default="The history of the city")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--libs", type=int, default=12, help="largest libraries listed")
    args = ap.parse_args()

    checkpoint = os.path.join(args.model, "model.safetensors")
    ckpt_kib = os.path.getsize(checkpoint) / 1024
    cmd = [args.tandem, "generate", "--device", "cpu", "--model", args.model, "--prompt", args.prompt,
           "--max-tokens", str(args.max_tokens)]
    print("command:", " ".join(cmd))
    peaks = []
    best = None
    for r in range(args.rounds):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG if r == args.rounds - 1 else 0)
            if pid != 0:
                break
            s = smaps_sample(p.pid)  # the last run: sampled until it exits
            if s and (best is None or sum(s.values()) > sum(best.values())):
                best = s
            time.sleep(0.003)
        p.returncode = os.waitstatus_to_exitcode(status)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"tandem generate failed (exit {os.waitstatus_to_exitcode(status)})")
        peaks.append(usage.ru_maxrss)
    med = statistics.median(peaks)
    print(f"max RSS (ru_maxrss, {args.rounds} runs): median {med:.0f} KiB ({med / 1024:.1f} MiB), "
          f"min {min(peaks)} max {max(peaks)} KiB")
    print(f"checkpoint {ckpt_kib:.0f} KiB; goal 1.3x = {1.3 * ckpt_kib:.0f} KiB; "
          f"max RSS / checkpoint = {med / ckpt_kib:.3f}")
    if best is None:
        print("no smaps sample (the run ended first)")
        return
    cats, libs = categorize(best, checkpoint)
    total = sum(best.values())
    print(f"largest smaps sample of the last run: {total} KiB")
    for k in ("checkpoint", "heap", "anon", "binary", "libs", "other"):
        print(f"  {k:<10} {cats[k]:>7} KiB")
    top = sorted(libs.items(), key=lambda kv: -kv[1])[: args.libs]
    print(f"  libraries ({len(libs)}), largest: " + ", ".join(f"{n} {kb}" for n, kb in top))
    cublas = [n for n in libs if n.startswith("libcublas")]
    print("  cuBLAS mapped: " + (", ".join(cublas) if cublas else "no"))


if __name__ == "__main__":
    main()
