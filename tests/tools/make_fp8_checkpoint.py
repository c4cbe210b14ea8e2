#!/usr/bin/env python3
"""Writes an FP8 (e4m3) form of a bf16/f16/f32 safetensors checkpoint, as the tests' reference
for tandem's FP8 loader (issue 28). Python's standard library only; written from the formats'
own descriptions, independently of tandem's C++ (src/kernels/cpu/fp8.cc):

  e4m3: OCP OFP8 spec rev. 1.0 section 5.1 (bias 7, no inf, S.1111.111 NaN, max 448); a value is
        encoded as the nearest of the 255 finite values (found by bisection), ties to the even
        code, beyond 448 saturated (torch clamps to +-448 before .to(float8_e4m3fn)).
  schemes (every linear projection of the decoder layers; embeddings, norms, lm_head kept):
    block   transformers' FineGrainedFP8 (Qwen/Qwen3-8B-FP8): quantization_config
            {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
             "weight_block_size": [128, 128]}; `weight_scale_inv` [ceil(out/128), ceil(in/128)]
            = block amax / 448.
    channel compressed-tensors float-quantized, strategy "channel": `weight_scale` [out, 1].
    tensor  compressed-tensors float-quantized, strategy "tensor": `weight_scale` [1].
    none    the weights as they are (with --kv-scales: a bf16 checkpoint with calibrated KV scales).
  --kv-scales K,V adds each layer's FP8 KV-cache scales under vLLM's names,
        model.layers.N.self_attn.k_scale / v_scale (F32, shape []): K * (1 + N / 8), V * (1 + N / 8).

usage: make_fp8_checkpoint.py SRC_DIR DST_DIR {block,channel,tensor,none} [--scale-dtype F32|BF16]
       [--dequantized FILE]   also write the dequantized f32 weights (q * scale rounded to f32)
       [--kv-scales K,V]
The tokenizer and generation files are linked into DST_DIR; config.json gets quantization_config.
"""
import argparse, bisect, json, math, os, struct, sys

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def e4m3_value(code):
    s = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 7
    if e == 0xF and m == 7:
        return math.nan
    return s * (m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


POS = [e4m3_value(c) for c in range(0x7F)]  # codes 0x00..0x7e, increasing


def encode(x):
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a >= 448.0:
        return sign | 0x7E
    i = bisect.bisect_left(POS, a)  # POS[i-1] < a <= POS[i]
    if POS[i] == a:
        return sign | i
    lo, hi = POS[i - 1], POS[i]
    if a - lo < hi - a or (a - lo == hi - a and (i - 1) % 2 == 0):
        return sign | (i - 1)
    return sign | i


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_bits(x):  # round to nearest even
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    b += 0x7FFF + ((b >> 16) & 1)
    return (b >> 16) & 0xFFFF


def read_safetensors(path, want):
    """name -> (dtype, shape, floats or None, raw bytes); floats only for names want() picks."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[b:e]
        if not want(name, t["shape"]):
            vals = None
        elif t["dtype"] == "BF16":
            vals = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack(f"<{len(raw)//2}H", raw)]
        elif t["dtype"] == "F16":
            vals = list(struct.unpack(f"<{len(raw)//2}e", raw))
        elif t["dtype"] == "F32":
            vals = list(struct.unpack(f"<{len(raw)//4}f", raw))
        else:
            sys.exit(f"{name}: dtype {t['dtype']} is not bf16/f16/f32")
        out[name] = (t["dtype"], t["shape"], vals, raw)
    return out


def write_safetensors(path, tensors):  # name -> (dtype, shape, bytes)
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def quantize(vals, rows, cols, br, bc):
    """q codes, scales [ceil(rows/br) * ceil(cols/bc)] (floats rounded to f32), dequantized."""
    sr, sc = -(-rows // br), -(-cols // bc)
    scales = []
    for i in range(sr):
        for j in range(sc):
            amax = max((abs(vals[r * cols + c]) for r in range(i * br, min(rows, (i + 1) * br))
                        for c in range(j * bc, min(cols, (j + 1) * bc))), default=0.0)
            scales.append(f32(amax / 448.0) if amax > 0 else 1.0)
    return scales, sr, sc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("scheme", choices=["block", "channel", "tensor", "none"])
    ap.add_argument("--scale-dtype", choices=["F32", "BF16"], default="F32")
    ap.add_argument("--dequantized")
    ap.add_argument("--kv-scales")
    a = ap.parse_args()
    is_linear = lambda name, shape: (a.scheme != "none" and len(shape) == 2 and name.endswith(".weight")
                                     and name.split(".")[-2] in LINEAR)
    src = read_safetensors(os.path.join(a.src, "model.safetensors"), is_linear)
    out, deq = {}, {}
    for name, (dtype, shape, vals, raw) in src.items():
        if vals is None:
            out[name] = (dtype, shape, raw)
            continue
        rows, cols = shape
        br, bc = {"block": (128, 128), "channel": (1, cols), "tensor": (rows, cols)}[a.scheme]
        scales, sr, sc = quantize(vals, rows, cols, br, bc)
        if a.scale_dtype == "BF16":  # the scale the file holds is what dequantizes
            scales = [struct.unpack("<f", struct.pack("<I", bf16_bits(s) << 16))[0] for s in scales]
        q = bytearray(rows * cols)
        d = [0.0] * (rows * cols)
        for r in range(rows):
            for c in range(cols):
                s = scales[(r // br) * sc + c // bc]
                k = r * cols + c
                q[k] = encode(f32(vals[k] / s))  # w / scale in f32, as torch divides f32 tensors
                d[k] = f32(e4m3_value(q[k]) * s)
        out[name] = ("F8_E4M3", shape, bytes(q))
        sname = name + ("_scale_inv" if a.scheme == "block" else "_scale")
        sshape = {"block": [sr, sc], "channel": [rows, 1], "tensor": [1]}[a.scheme]
        if a.scale_dtype == "F32":
            sraw = struct.pack(f"<{len(scales)}f", *scales)
        else:
            sraw = struct.pack(f"<{len(scales)}H", *[bf16_bits(s) for s in scales])
        out[sname] = (a.scale_dtype, sshape, sraw)
        deq[name] = ("F32", shape, struct.pack(f"<{len(d)}f", *d))
    if a.kv_scales:
        k0, v0 = (float(x) for x in a.kv_scales.split(","))
        cfg0 = json.load(open(os.path.join(a.src, "config.json")))
        for n in range(cfg0["num_hidden_layers"]):
            for which, base in (("k_scale", k0), ("v_scale", v0)):
                out[f"model.layers.{n}.self_attn.{which}"] = ("F32", [], struct.pack("<f", f32(base * (1 + n / 8))))
    os.makedirs(a.dst, exist_ok=True)
    write_safetensors(os.path.join(a.dst, "model.safetensors"), out)
    if a.dequantized:
        write_safetensors(a.dequantized, deq)
    cfg = json.load(open(os.path.join(a.src, "config.json")))
    if a.scheme == "none":
        pass
    elif a.scheme == "block":
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                      "weight_block_size": [128, 128]}
    else:
        cfg["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": a.scheme, "symmetric": True, "dynamic": False},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True, "dynamic": True}}},
            "ignore": ["lm_head"]}
    json.dump(cfg, open(os.path.join(a.dst, "config.json"), "w"), indent=2)
    for f in os.listdir(a.src):
        if f.startswith("tokenizer") or f == "generation_config.json":
            dst = os.path.join(a.dst, f)
            if not os.path.exists(dst):
                os.symlink(os.path.abspath(os.path.join(a.src, f)), dst)


if __name__ == "__main__":
    main()
