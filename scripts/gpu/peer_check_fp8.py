#!/usr/bin/env python3
"""FP8 peer check (issue 28, deliverable 4): tandem's CUDA runner on an FP8 checkpoint against HF
transformers running the same checkpoint, on random weights with Qwen3-8B's or Qwen3-0.6B's config.

  1. the random bf16 model of peer_check.py (qwen3_random.py) with each projection's 128 x 128 blocks
     scaled by 1, 2 or 3 in turn (so the FP8 block scales differ), saved as WORKDIR/qwen3-<name>-blocky;
  2. HF quantizes it at load with FineGrainedFP8Config (e4m3 weights, 128 x 128 block scales
     `weight_scale_inv`, activations quantized per token and 128 columns at run time: the scheme
     of Qwen/Qwen3-8B-FP8) and saves it (save_pretrained) into WORKDIR/qwen3-<name>-fp8; the script
     stops unless the saved config says fp8 with 128x128 blocks and q_proj is float8_e4m3fn with a scale;
  3. HF FP8: the saved checkpoint loaded back with FineGrainedFP8Config(dequantize=True) (HF's FP8
     matmul kernels come from the `kernels` hub package, absent on the device machine): every prompt
     row's logits and N greedy steps (peer_check.hf_side) with the checkpoint's weights and bf16
     activations; HF bf16 (the unquantized model): the prompt rows, the reference both are held to;
  4. cuda_peer_dump on the saved FP8 checkpoint (tandem reads the block scales as stored: its log must
     say every projection kept 128x128 block scales), twice:
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
    ckpt = os.path.join(a.workdir, "qwen3-%s-blocky" % name)
    ckpt8 = os.path.join(a.workdir, "qwen3-%s-fp8" % name)
    log("== FP8 peer check qwen3-%s: torch %s, transformers %s" % (name, torch.__version__,
                                                                  transformers.__version__))
    made_bf16 = not os.path.exists(os.path.join(ckpt, "config.json"))
    if made_bf16:
        # The random model with each projection's 128 x 128 blocks scaled by 1, 2 or 3 in turn, so
        # that the blocks' FP8 scales differ and a misread scale grid shows (i.i.d. weights would give
        # every block nearly the same scale).
        model = qwen3_random.build(name, seed=peer_check.SEED)
        with torch.no_grad():
            for mod_name, mod in model.named_modules():
                if isinstance(mod, torch.nn.Linear) and ".layers." in mod_name:
                    w = mod.weight
                    r = torch.arange(w.shape[0], device=w.device) // 128
                    c = torch.arange(w.shape[1], device=w.device) // 128
                    w.mul_(((r[:, None] + c[None, :]) % 3 + 1).to(w.dtype))
        peer_check.ensure_checkpoint(name, ckpt, model)
        del model
        qwen3_random.empty_cache()
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
    # What is being checked must be there: a fine-grained FP8 checkpoint with e4m3 projections.
    if not qc or qc.get("quant_method") != "fp8" or list(qc.get("weight_block_size") or []) != [128, 128]:
        raise SystemExit("the saved checkpoint is not FineGrainedFP8 with 128x128 blocks: %s" % json.dumps(qc))
    from safetensors import safe_open
    idx = os.path.join(ckpt8, "model.safetensors.index.json")
    qname = "model.layers.0.self_attn.q_proj.weight"
    fname = json.load(open(idx))["weight_map"][qname] if os.path.exists(idx) else "model.safetensors"
    with safe_open(os.path.join(ckpt8, fname), "pt") as f:
        qdtype = f.get_tensor(qname).dtype
        has_scale = qname + "_scale_inv" in f.keys()
    if qdtype != torch.float8_e4m3fn or not has_scale:
        raise SystemExit("%s is %s (scale_inv %s): not an FP8 checkpoint" % (qname, qdtype, has_scale))
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
        ids_file = peer_check.fresh_dump_dir(dump_dir, prompts)
        cmd = [a.dump, ckpt8, "--ids", ids_file, "--out", dump_dir, "--steps", str(a.steps), "--prompt-logits"]
        log("== tandem %s: %s$ %s" % (mode, "".join("%s=%s " % kv for kv in env.items()), " ".join(cmd)))
        t0 = time.time()
        run = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True)
        sys.stdout.write(run.stdout)
        sys.stdout.write(run.stderr)
        log("cuda_peer_dump exit %d in %.1f s" % (run.returncode, time.time() - t0))
        if run.returncode != 0:
            return 2
        # tandem must have kept the checkpoint's blocks (not requantized per channel).
        want = "%d projections with 128x128 block scales, 0 per channel" % (4 * qwen3_random.make_config(name).num_hidden_layers)
        if want not in run.stdout + run.stderr:
            log("FAIL: tandem's log does not say '%s'" % want)
            return 1
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
