"""Random-weight Qwen3 checkpoints with the real models' shapes, built with transformers on the GPU.

Used by peer_check.py and hf_bench.py (device machine: PyTorch + transformers, no downloads).

Weights (seeded, drawn on the GPU in bf16):
  - linear layers (q/k/v/o, gate/up/down): N(0, 0.02), HF's own initializer_range;
  - RMSNorm weights (input/post-attention, q_norm/k_norm, final): 1 + N(0, 0.1), so that a runner
    that ignores or misreads a norm weight shows it;
  - embed_tokens and lm_head (one tensor when tied): N(0, LOGIT_STD / sqrt(hidden)). The final norm
    leaves unit-RMS rows, so the logits come out with a standard deviation near LOGIT_STD = 4:
    the greedy token then holds a real share of the probability (with HF's 0.02 the 0.6B's
    logits would have std 0.64, nearly flat). A note: the top-two gap relative to a runner's
    relative error does not depend on this scale, so near-ties still happen and the peer check
    excuses a divergence only where HF's own margin is inside the error.
"""
import contextlib
import json
import math
import os

LOGIT_STD = 4.0
# "cuda" on the device; QWEN3_RANDOM_DEVICE=cpu only for trying the scripts' flow without a GPU.
DEV = os.environ.get("QWEN3_RANDOM_DEVICE", "cuda")


def sync():
    import torch
    if DEV == "cuda":
        torch.cuda.synchronize()


def empty_cache():
    import torch
    if DEV == "cuda":
        torch.cuda.empty_cache()

CONFIGS = {
    # Qwen3-8B (config.json of the real model)
    "8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               tie_word_embeddings=False),
    # Qwen3-0.6B
    "0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                 tie_word_embeddings=True),
}
COMMON = dict(vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
              hidden_act="silu", attention_bias=False, bos_token_id=151643, eos_token_id=151645,
              use_sliding_window=False, sliding_window=None, max_window_layers=28,
              attention_dropout=0.0, initializer_range=0.02)
ROPE_THETA = 1e6


def make_config(name):
    from transformers import Qwen3Config
    kw = dict(COMMON, **CONFIGS[name])
    try:  # transformers >= 5: rope_parameters
        cfg = Qwen3Config(**kw, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    except TypeError:
        cfg = Qwen3Config(**kw, rope_theta=ROPE_THETA)
    # Whatever the version kept, make both spellings say 1e6.
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict):
        rp["rope_theta"] = ROPE_THETA
        rp.setdefault("rope_type", "default")
    if hasattr(cfg, "rope_theta") or not isinstance(rp, dict):
        cfg.rope_theta = ROPE_THETA
    cfg.architectures = ["Qwen3ForCausalLM"]
    return cfg


def _init_weights(model, seed, hidden):
    import torch
    gen = torch.Generator(device=DEV)
    gen.manual_seed(seed)
    emb_std = LOGIT_STD / math.sqrt(hidden)
    seen = set()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.data_ptr() in seen:  # tied lm_head
                continue
            seen.add(p.data_ptr())
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen, device=DEV,
                                                dtype=torch.float32))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(emb_std * torch.randn(p.shape, generator=gen, device=DEV,
                                              dtype=torch.float32))
            else:
                # bf16 directly: an 8B model's fp32 temporaries would be 4 GB a matrix at most.
                p.normal_(0.0, 0.02, generator=gen)


def build(name, seed=1234, attn="sdpa"):
    """The model on cuda:0 (DEV) in bf16, eval mode, weights as in the module docstring."""
    import torch
    from transformers import AutoModelForCausalLM
    cfg = make_config(name)
    torch.manual_seed(seed)
    try:
        where = torch.device(DEV) if hasattr(torch.device(DEV), "__enter__") else contextlib.nullcontext()
    except TypeError:
        where = contextlib.nullcontext()
    with where:
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16,
                                                     attn_implementation=attn)
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16,
                                                     attn_implementation=attn)
    model = model.to(device=DEV).eval()
    if next(model.parameters()).dtype != torch.bfloat16:
        # Only the parameters: Module.to(dtype) would also round the fp32 RoPE buffers to bf16.
        for p in model.parameters():
            p.data = p.data.to(torch.bfloat16)
    _init_weights(model, seed, cfg.hidden_size)
    check_rope(model)
    return model


def check_rope(model):
    """Checks that the model's rotary inverse frequencies use theta 1e6 (not the default 1e4) and
    are fp32 (a bf16 copy would be rounded: then the exact fp32 values are put back)."""
    import torch
    rot = getattr(getattr(model, "model", model), "rotary_emb", None)
    inv = getattr(rot, "inv_freq", None)
    if inv is None:
        print("note: no model.rotary_emb.inv_freq to check rope_theta against")
        return
    d = inv.numel() * 2
    want = 1.0 / (ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    got = inv.detach().double().cpu()
    if not torch.allclose(got, want, rtol=1e-2):
        raise SystemExit("rope_theta is not 1e6 in the HF model (inv_freq[1] = %g, want %g)"
                         % (got[1].item(), want[1].item()))
    if inv.dtype != torch.float32 or not torch.allclose(got, want, rtol=1e-6):
        print("note: HF's inv_freq was %s; set to the fp32 values of theta 1e6" % inv.dtype)
        exact = (1.0 / (ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))).to(DEV)
        rot.inv_freq = exact
        if hasattr(rot, "original_inv_freq"):
            rot.original_inv_freq = exact


def save(model, out_dir):
    """save_pretrained as safetensors; checks config.json's rope theta (tandem reads it)."""
    os.makedirs(out_dir, exist_ok=True)
    try:
        model.save_pretrained(out_dir, safe_serialization=True, max_shard_size="5GB")
    except TypeError:
        model.save_pretrained(out_dir, max_shard_size="5GB")
    path = os.path.join(out_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rp = cfg.get("rope_parameters") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta"))
    if theta != ROPE_THETA:
        cfg["rope_theta"] = ROPE_THETA
        if isinstance(cfg.get("rope_parameters"), dict):
            cfg["rope_parameters"]["rope_theta"] = ROPE_THETA
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
        print("note: config.json's rope theta was %r, set to 1e6" % (theta,))
    files = sorted(os.listdir(out_dir))
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in files)
    print("saved %s: %s (%.2f GB)" % (out_dir, " ".join(files), size / 1e9))


def param_counts(cfg):
    """(parameters besides the embedding table, embedding table) from a config dict."""
    h, i, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nh, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // nh
    V = cfg["vocab_size"]
    layer = h * nh * hd + 2 * h * kv * hd + nh * hd * h + 3 * h * i + 2 * h + 2 * hd
    lm_head = V * h  # read by every step even when tied
    return L * layer + h + lm_head, V * h
