#!/usr/bin/env python3
"""FP8 peer check (issue 28, deliverable 4): tandem's CUDA runner on an FP8 checkpoint against HF
transformers running the same checkpoint, on random weights with Qwen3-8B's or Qwen3-0.6B's config.

  1. the random bf16 checkpoint of peer_check.py (qwen3_random.py; made unless it is there);
  2. HF quantizes it at load with FineGrainedFP8Config (e4m3 weights, 128 x 128 block scales
     `weight_scale_inv`, activations quantized per token and 128 columns at run time: the scheme
     of Qwen/Qwen3-8B-FP8) and saves it (save_pretrained) into WORKDIR/qwen3-<name>-fp8;
  3. HF FP8: the saved checkpoint loaded back with FineGrainedFP8Config(dequantize=True) (HF's FP8
     matmul kernels come from the `kernels` hub package, absent on the device machine): every prompt
     row's logits and N greedy steps (peer_check.hf_side) with the checkpoint's weights and bf16
     activations; HF bf16 (the unquantized model): the prompt rows, the reference both are held to;
  4. cuda_peer_dump on the saved FP8 checkpoint (tandem reads the block scales as stored), twice:
     as tandem serves (prefill GEMMs W8A8: activations quantized per token and 128 columns) and
     with TANDEM_FP8_GEMM=dequant (every row weight-only, HF's numerics);
  5. peer_check.compare: tandem FP8 against HF FP8 per row (worst, median), both against HF bf16,
     the first greedy divergence and whether it is a near-tie.
Pass: worst prompt-row error against HF FP8 <= --tol, or tandem's worst row against HF bf16 at most
twice HF FP8's; every divergence a near-tie. Exit 0 pass, 1 fail, 2 error; --json writes a summary.

Usage: peer_check_fp8.py --model 8b|0.6b --dump PATH/cuda_peer_dump [--workdir DIR] [--steps 32]
                         [--tol 0.05] [--keep] [--json FILE]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_check  # noqa: E402
import qwen3_random  # noqa: E402

log = peer_check.log


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(qwen3_random.CONFIGS), required=True)
    ap.add_argument("--dump", required=True, help="the cuda_peer_dump binary")
    ap.add_argument("--workdir", default=os.environ.get("PEER_WORKDIR") or peer_check.default_workdir())
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--tol", type=float, default=5e-2)
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints")
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config
    name = a.model
    t_all = time.time()
    os.makedirs(a.workdir, exist_ok=True)
    ckpt = os.path.join(a.workdir, "qwen3-" + name)
    ckpt8 = ckpt + "-fp8"
    log("== FP8 peer check qwen3-%s: torch %s, transformers %s" % (name, torch.__version__,
                                                                  transformers.__version__))
    made_bf16 = not os.path.exists(os.path.join(ckpt, "config.json"))
    peer_check.ensure_checkpoint(name, ckpt)
    prompts = peer_check.make_prompts()

    # HF bf16: the reference rows.
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16, device_map="cuda",
                                                 attn_implementation="sdpa")
    ref = []
    with torch.no_grad():
        for ids in prompts:
            ref.append(model(input_ids=torch.tensor([ids], device="cuda"), use_cache=False).logits[0].float().cpu())
    del model
    qwen3_random.empty_cache()
    log("HF bf16 reference rows in %.1f s" % (time.time() - t0))

    # HF FP8: quantized at load, saved, run.
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16, device_map="cuda",
                                                 attn_implementation="sdpa",
                                                 quantization_config=FineGrainedFP8Config())
    shutil.rmtree(ckpt8, ignore_errors=True)
    model.save_pretrained(ckpt8)
    qc = json.load(open(os.path.join(ckpt8, "config.json"))).get("quantization_config")
    log("HF FP8 model quantized and saved in %.1f s: quantization_config %s" % (time.time() - t0, json.dumps(qc)))
    del model
    qwen3_random.empty_cache()
    # HF's FP8 forward needs the `kernels` hub package (not on the device machine, which has no
    # network); FineGrainedFP8Config(dequantize=True) loads the saved FP8 checkpoint through HF's own
    # dequantization (code x weight_scale_inv per block, to bf16): the checkpoint's weights, bf16
    # activations. tandem quantizes activations per token and 128 columns in its GEMMs (prefill rows),
    # not in its GEMV (decode steps at batch 1), so the prompt rows carry that extra rounding.
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(ckpt8, dtype=torch.bfloat16, device_map="cuda",
                                                 attn_implementation="sdpa",
                                                 quantization_config=FineGrainedFP8Config(dequantize=True))
    hf = peer_check.hf_side(model, prompts, a.steps)
    del model
    qwen3_random.empty_cache()
    log("HF FP8 (dequantized at load) side in %.1f s" % (time.time() - t0))

    # tandem twice: as it serves (W8A8 GEMMs in the prefill), and with TANDEM_FP8_GEMM=dequant
    # (every row weight-only, as HF's dequantized run): the second isolates the checkpoint's reading.
    ok, all_results = True, {}
    for mode, env in (("weight-only", {"TANDEM_FP8_GEMM": "dequant"}), ("w8a8", {})):
        dump_dir = os.path.join(a.workdir, "dump-%s-fp8" % name)
        shutil.rmtree(dump_dir, ignore_errors=True)
        os.makedirs(dump_dir)
        ids_file = os.path.join(dump_dir, "ids.txt")
        with open(ids_file, "w") as f:
            for ids in prompts:
                f.write(" ".join(map(str, ids)) + "\n")
        cmd = [a.dump, ckpt8, "--ids", ids_file, "--out", dump_dir, "--steps", str(a.steps), "--prompt-logits"]
        log("== tandem %s: %s$ %s" % (mode, "".join("%s=%s " % kv for kv in env.items()), " ".join(cmd)))
        t0 = time.time()
        rc = subprocess.call(cmd, env=dict(os.environ, **env))
        log("cuda_peer_dump exit %d in %.1f s" % (rc, time.time() - t0))
        if rc != 0:
            return 2
        mode_ok, results = peer_check.compare("%s-fp8-%s" % (name, mode), prompts, hf, ref, dump_dir, a.steps,
                                              a.tol, hf_label="HF FP8 dequantized", ref_label="HF bf16")
        shutil.rmtree(dump_dir, ignore_errors=True)
        ok = ok and mode_ok
        all_results[mode] = results
    if not a.keep:
        shutil.rmtree(ckpt8, ignore_errors=True)
        if made_bf16:
            shutil.rmtree(ckpt, ignore_errors=True)
    log("FP8 peer check qwen3-%s: %s (tol %.0e against HF FP8 on the worst prompt row, or tandem within 2x "
        "of HF FP8 against HF bf16; %.1f s)" % (name, "PASS" if ok else "FAIL", a.tol, time.time() - t_all))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(model=name, scheme="FineGrainedFP8 128x128", tol=a.tol, steps=a.steps, ok=ok,
                           modes=all_results), f)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
