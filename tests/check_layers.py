#!/usr/bin/env python3
"""The layering of src/ (docs/architecture.md): every #include "..." of a file under src/ names a
folder at the same layer or a lower one, never a higher one; every folder of src/ is in LAYERS; no
source file outside tests/ and dev/ is over MAX_LINES lines.

Usage: check_layers.py [REPO]         exit 1 and one line per violation
       check_layers.py --self-test    checks that a bad include and a long file do fail
"""
import os
import re
import sys
import tempfile

# Bottom to top. A file may include its own folder and any folder listed before it. A nested folder
# (kernels/cpu) is its own layer when listed; otherwise it belongs to the nearest listed parent.
LAYERS = [
    "common",        # status, logging, files, metrics
    "kernels/cpu",   # one op per file pair: the CPU reference
    "kernels/cuda",  # the same ops on the GPU
    "model",         # HF config, safetensors, weights, model runners (CPU, CUDA)
    "tokenizer",     # byte-level BPE, added tokens, incremental detokenizer
    "chat",          # chat templates (the Jinja subset), chat prompt encoding
    "grammar",       # structured outputs: grammars, the byte-level pushdown automaton, token masks
    "chat_parse",    # reasoning and tool-call parsers of chat output, the forced-tool-call grammar
    "kvtier",        # KV cache tiers below the pool: the host and disk tiers, the offloader
    "engine",        # requests, scheduler, KV cache, sampler, engine loop
    "transfer",      # the transfer agent and its backends
    "transfer/cuda",  # the agent's CUDA copier and CUDA IPC calls
    "discovery",     # which workers exist: files, etcd
    "events",        # the event plane: interface, ring, KV event codec, NATS
    "rpc",           # the request plane: Worker gRPC service and clients, embedded event plane
    "router",        # KV-aware routing: index, cost, decode and prefill worker choice
    "frontend",      # OpenAI HTTP API
    "worker",        # worker roles: prefill handler, decode disagg, KV event publisher
    "planner",       # SLA planner: profiles, load prediction, replica decisions
    "deploy",        # graphs, the process supervisor
    "deploy/k8s",    # Kubernetes rendering of a graph
    "loadgen",       # `tandem bench`
    "cli",           # the `tandem` subcommands
]
MAX_LINES = 600
SOURCE_EXT = (".h", ".cc", ".cu", ".cuh", ".proto")
# Outside tests/ and dev/: the folders whose files are held to MAX_LINES.
SIZE_DIRS = ("src", "bench", "scripts")
SIZE_EXT = SOURCE_EXT + (".py", ".sh", ".mjs")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    """The index in LAYERS of a path relative to src/ (its longest listed folder), or None."""
    parts = path.split("/")[:-1]
    while parts:
        folder = "/".join(parts)
        if folder in LAYERS:
            return LAYERS.index(folder)
        parts.pop()
    return None


def check(repo):
    errors = []
    src = os.path.join(repo, "src")
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(SOURCE_EXT):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), src)
            own = layer_of(rel)
            if own is None:
                errors.append(f"src/{rel}: its folder is not in the layer list of {__file__}")
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    if "/" not in inc or inc.startswith("."):
                        errors.append(f"src/{rel}:{lineno}: #include \"{inc}\": name it from src/ "
                                      "(folder/file.h)")
                        continue
                    target = layer_of(inc)
                    if target is None:
                        errors.append(f"src/{rel}:{lineno}: #include \"{inc}\": not a folder of "
                                      "the layer list")
                    elif target > own:
                        errors.append(f"src/{rel}:{lineno}: #include \"{inc}\": {LAYERS[own]} is "
                                      f"below {LAYERS[target]} (a lower folder includes a higher one)")
    for top in SIZE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(repo, top)):
            if "node_modules" in dirpath or os.sep + "results" in dirpath:
                continue
            for name in sorted(files):
                if not name.endswith(SIZE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    n = sum(1 for _ in f)
                if n > MAX_LINES:
                    errors.append(f"{os.path.relpath(path, repo)}: {n} lines, more than {MAX_LINES}: "
                                  "split it by concern")
    return errors


def self_test():
    with tempfile.TemporaryDirectory() as repo:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(repo, rel)), exist_ok=True)
            with open(os.path.join(repo, rel), "w") as f:
                f.write(text)
        write("src/common/status.h", "#pragma once\n")
        write("src/engine/engine.h", '#include "common/status.h"\n#include "kernels/cpu/rope.h"\n')
        write("src/kernels/cpu/rope.h", "#pragma once\n")
        write("src/cli/main.cc", '#include "engine/engine.h"\n#include "deploy/k8s/render.h"\n')
        write("src/deploy/k8s/render.h", '#include "deploy/graph.h"\n')
        assert check(repo) == [], check(repo)
        write("src/engine/engine.h", '#include "common/status.h"\n#include "rpc/worker_server.h"\n')
        bad = check(repo)
        assert len(bad) == 1 and "engine is below rpc" in bad[0], bad
        write("src/engine/engine.h", '#include "common/status.h"\n')
        write("src/kernels/cpu/rope.h", '#include "model/config.h"\n')  # nested folder, lower layer
        bad = check(repo)
        assert len(bad) == 1 and "kernels/cpu is below model" in bad[0], bad
        write("src/kernels/cpu/rope.h", "#pragma once\n")
        write("src/newthing/x.h", "#pragma once\n")  # a folder nobody placed
        bad = check(repo)
        assert len(bad) == 1 and "not in the layer list" in bad[0], bad
        os.remove(os.path.join(repo, "src/newthing/x.h"))
        write("src/engine/big.cc", "//\n" * (MAX_LINES + 1))
        bad = check(repo)
        assert len(bad) == 1 and "more than" in bad[0], bad
    print("self-test: a bad include, an unplaced folder and a long file all fail")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    errors = check(repo)
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} violation(s) of the layering (tests/check_layers.py)")
        return 1
    print(f"layers OK: {' < '.join(LAYERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
