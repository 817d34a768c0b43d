#!/usr/bin/env python3
"""Builds the tiny GGUF models the GGUF loader is tested on, and records what Hugging Face
transformers computes for them (the independent oracle).

Run by developers, not by CI:
    /path/to/venv/bin/python tests/tools/make_gguf_model_fixtures.py            # writes
    /path/to/venv/bin/python tests/tools/make_gguf_model_fixtures.py --verify   # checks
Needs: torch, transformers (4.57.1 wrote the committed files; --verify was also run with
5.24.0, but writing needs 4.x: 5's configs have no rope_theta), tokenizers, gguf (0.19.0), numpy.

Writes tests/data/models-gguf/<name>.gguf and <name>.json (prompt ids, last-position logits,
16 greedy tokens and how clear each choice was: top-1 minus top-2 logit over the range). Every weight matrix is random blocks of its GGUF format (random bits, the
fp16 scale fields scaled so the weights have the spread of a trained layer); the transformers
model computes with gguf-py's dequantisation of exactly those blocks. The files are written
as llama.cpp's converter writes them (tensor names, metadata keys, Llama's query and key rows
reordered for ggml's rotary mode), and for the dense ones, which transformers can load from
GGUF itself (llama, qwen3), the script also loads each file that way and requires the same
logits: a second check that the files say what the oracle computed.

The second oracle is llama.cpp itself (--llama-cpp ROOT BUILD, a llama.cpp or ik_llama.cpp
checkout and its build folder, required to write): tests/tools/llama_logits.cpp is compiled
against it and its logits on each file are recorded beside transformers', with how far apart
the two are; where it refuses a file (it reads some architectures only at the released
models' sizes) or is known to compute one wrongly, the JSON says so. The committed files
record mainline llama.cpp 0c1e570, the copy vendored in llama-cpp-python 0.3.36's source
distribution (built with its own CMake, which makes libllama and libggml):
    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
    tar xzf llama_cpp_python-0.3.36.tar.gz && cd llama_cpp_python-0.3.36/vendor/llama.cpp
    cmake -B build && cmake --build build --target llama
    python tests/tools/make_gguf_model_fixtures.py --llama-cpp $PWD $PWD/build
(ik_llama.cpp 8337e4cd3 made them before; it computes Mixtral wrongly, see KNOWN_FAULTS.)

Architectures: qwen3moe, qwen3, llama, llama with experts (Mixtral), deepseek2 (both ways
llama.cpp has stored MLA's kv_b: whole, and split per head into attn_k_b and attn_v_b with the
attention described as multi-query; DeepSeek-V2's softmax router and V3's sigmoid one) and glm4moe (with a next-token-prediction layer appended,
which readers leave out). `--only NAME[,NAME]` writes or verifies only those fixtures.

Between them the fixtures hold every block format Tandem computes with: Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
IQ3_S, IQ1_S, IQ1_M, F16, BF16 and F32.
"""
import importlib.metadata
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_fixtures import CHAT_TEMPLATE, GREEDY_TOKENS, PROMPTS, build_tokenizer  # noqa: E402

TF5 = transformers.__version__.startswith("5.")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "models-gguf")

# IQ1_M has no fp16 field: its d is the top nibbles of the four 16-bit scale words at byte 48
# (the first word's the lowest).
IQ1_M_SCALE = "iq1_m"

# Byte offsets of the fp16 scale (and minimum) fields in one block of each format.
SCALE_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.IQ4_NL: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_XS: [0], T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0], T.IQ1_M: [IQ1_M_SCALE],
}


def random_tensor(rng, shape, qtype, sigma):
    """A tensor of `shape` (rows last-but-one, columns last) as `qtype`: the stored array
    (uint8 blocks for a block format) and its float32 dequantisation."""
    rows = int(np.prod(shape[:-1]))
    cols = shape[-1]
    if qtype in (T.F32, T.F16, T.BF16):
        values = (rng.standard_normal((rows, cols)) * sigma).astype(np.float32)
        if qtype == T.F32:
            stored = values
        elif qtype == T.F16:
            stored = values.astype(np.float16)
            values = stored.astype(np.float32)
        else:
            bits = (values.view(np.uint32) + 0x8000) >> 16  # round to nearest
            stored = bits.astype(np.uint16)
            values = (bits.astype(np.uint32) << 16).view(np.float32)
        return stored.reshape(shape), values.reshape(shape)
    block_weights, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    assert cols % block_weights == 0, (qtype.name, shape)
    blocks = rows * cols // block_weights
    raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    if qtype == T.Q8_0:
        # llama.cpp's quantiser never writes -128 and its kernels take |q| as a byte, which
        # -128 overflows: as in every real file, the codes stay within -127 ... 127.
        codes = raw[:, 2:]
        codes[codes == 0x80] = 0x81
    fields = SCALE_FIELDS[qtype]

    def set_fields(scale):
        for i, off in enumerate(fields):
            sign = 1.0 if i == 0 else rng.choice([-1.0, 1.0], size=blocks)
            v = (scale * sign * rng.uniform(0.5, 1.0, size=blocks)).astype(np.float16)
            if off == IQ1_M_SCALE:
                bits = v.view(np.uint16)
                for n in range(4):
                    nibble = ((bits >> (4 * n)) & 0x0F).astype(np.uint8)
                    raw[:, 49 + 2 * n] = (raw[:, 49 + 2 * n] & 0x0F) | (nibble << 4)
            else:
                raw[:, off:off + 2] = v.view(np.uint8).reshape(blocks, 2)

    set_fields(1.0)
    deq = quants.dequantize(raw, qtype).astype(np.float32)
    set_fields(sigma / float(deq.std()))  # the values scale with the fields
    deq = quants.dequantize(raw.reshape(rows, -1), qtype).astype(np.float32)
    assert np.all(np.isfinite(deq)), qtype.name
    return raw.reshape(*shape[:-1], cols // block_weights * block_bytes), deq.reshape(shape)


def permute_for_ggml(w, heads):
    """llama.cpp's converter's reordering of Llama's query/key rows, and its inverse."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, heads):
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class Fixture:
    def __init__(self, name, arch, config, types, seed, **layout):
        self.name, self.arch, self.config, self.types, self.seed = name, arch, config, types, seed
        # split_kv_b: MLA's kv_b stored as attn_k_b and attn_v_b, and the attention described
        # as multi-query (current llama.cpp); groups: the expert_group keys written;
        # predict_layers: next-token-prediction layers appended (GLM-4.5).
        self.layout = layout


def fixtures(vocab):
    common = dict(vocab_size=vocab, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, max_position_embeddings=256, rms_norm_eps=1e-6)
    out = []
    # Qwen3-MoE, all Q8_0 (llama.cpp's plain 8-bit file).
    out.append(Fixture("qwen3moe-q8_0", "qwen3moe", transformers.Qwen3MoeConfig(
        **common, intermediate_size=512, moe_intermediate_size=256, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rope_theta=1000000.0, tie_word_embeddings=False), {"*": T.Q8_0, "router": T.F32}, 11))
    # Qwen3-MoE mixed as unsloth's dynamic files are: 4-bit experts, 6-bit down projections,
    # 8-bit attention, every layer a little different.
    out.append(Fixture("qwen3moe-mixed", "qwen3moe", transformers.Qwen3MoeConfig(
        **common, intermediate_size=512, moe_intermediate_size=256, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rope_theta=1000000.0, tie_word_embeddings=False), {
            "token_embd": T.Q4_K, "output": T.Q6_K, "router": T.F16,
            "0.attn_q": T.Q8_0, "0.attn_k": T.Q8_0, "0.attn_v": T.Q6_K, "0.attn_output": T.Q5_K,
            "1.attn_q": T.Q4_K, "1.attn_k": T.Q5_K, "1.attn_v": T.Q8_0, "1.attn_output": T.IQ4_XS,
            "0.ffn_gate_exps": T.Q4_K, "0.ffn_up_exps": T.Q4_K, "0.ffn_down_exps": T.Q6_K,
            "1.ffn_gate_exps": T.Q3_K, "1.ffn_up_exps": T.Q2_K, "1.ffn_down_exps": T.Q5_K,
        }, 12))
    # Llama with tied embeddings and the 32-weight formats.
    out.append(Fixture("llama-mixed", "llama", transformers.LlamaConfig(
        **common, intermediate_size=512, rope_theta=500000.0, tie_word_embeddings=True), {
            "token_embd": T.Q8_0,
            "0.attn_q": T.Q4_0, "0.attn_k": T.Q4_1, "0.attn_v": T.Q5_0, "0.attn_output": T.Q5_1,
            "1.attn_q": T.IQ4_NL, "1.attn_k": T.Q5_1, "1.attn_v": T.Q4_0, "1.attn_output": T.Q4_1,
            "0.ffn_gate": T.Q5_0, "0.ffn_up": T.IQ4_NL, "0.ffn_down": T.Q4_0,
            "1.ffn_gate": T.Q4_K, "1.ffn_up": T.Q5_K, "1.ffn_down": T.Q6_K,
        }, 13))
    # Qwen3 (dense) in F16 and F32.
    out.append(Fixture("qwen3-f16", "qwen3", transformers.Qwen3Config(
        **common, intermediate_size=512, rope_theta=1000000.0, tie_word_embeddings=False), {
            "*": T.F16, "output": T.F32, "1.ffn_down": T.F32,
        }, 14))
    # Mixtral (llama with experts) in K formats, and BF16 (which transformers' GGUF reader
    # misreads, so it sits in a fixture that reader is not asked about).
    out.append(Fixture("mixtral-q4_k", "llama", transformers.MixtralConfig(
        **common, intermediate_size=256, num_local_experts=4, num_experts_per_tok=2,
        rope_theta=1000000.0, tie_word_embeddings=False), {
            "*": T.Q4_K, "router": T.BF16, "output": T.Q6_K, "token_embd": T.BF16,
            "1.attn_v": T.BF16}, 15))
    # DeepSeek-V3 as current llama.cpp converts it: kv_b split per head into attn_k_b and
    # attn_v_b, the attention described as multi-query, YaRN.
    mla = dict(vocab_size=vocab, hidden_size=256, num_attention_heads=4, num_key_value_heads=4,
               kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
               intermediate_size=512, moe_intermediate_size=256, n_routed_experts=8,
               num_experts_per_tok=2, n_shared_experts=1, max_position_embeddings=256,
               rms_norm_eps=1e-6, tie_word_embeddings=False, rope_theta=10000.0)
    # (ik_llama.cpp reads the multi-query form only at DeepSeek-V3's latent and rotary sizes;
    # mainline reads it at others too, but the fixture keeps these sizes for both.)
    out.append(Fixture("deepseek2-split", "deepseek2", transformers.DeepseekV3Config(
        **{**mla, "kv_lora_rank": 512, "qk_rope_head_dim": 64}, num_hidden_layers=3, q_lora_rank=128,
        first_k_dense_replace=1, n_group=1, topk_group=1, routed_scaling_factor=2.5,
        norm_topk_prob=True,
        rope_scaling={"type": "yarn", "rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 64, "beta_fast": 32.0, "beta_slow": 1.0,
                      "mscale": 1.0, "mscale_all_dim": 1.0}), {
            "*": T.Q8_0, "router": T.F32, "token_embd": T.Q4_K, "output": T.Q6_K,
            "attn_k_b": T.Q8_0, "attn_v_b": T.Q4_0, "1.attn_q_b": T.Q5_1,
            "ffn_gate_exps": T.Q4_K, "ffn_up_exps": T.Q4_K, "ffn_down_exps": T.Q6_K,
            "ffn_gate_shexp": T.Q5_K, "ffn_up_shexp": T.Q5_K, "ffn_down_shexp": T.Q8_0,
            "2.ffn_gate_exps": T.Q3_K, "2.ffn_down_exps": T.Q5_K}, 16, split_kv_b=True))
    # As older conversions (and ik_llama.cpp's) store it: kv_b whole, per-head sizes in
    # key_length and value_length; no low-rank query, experts in groups (expert_group_count,
    # which ik_llama.cpp ignores for this architecture). llama.cpp (mainline 0c1e570 as
    # ik_llama.cpp) refuses the file: it requires attention.q_lora_rank except at
    # DeepSeek-V2-Lite's layer counts. Given q_lora_rank = 0 in a copy, mainline computes it
    # within 1.3% of transformers, with or without the groups (which pick no other experts here).
    out.append(Fixture("deepseek2-kv_b", "deepseek2", transformers.DeepseekV3Config(
        **mla, num_hidden_layers=2, q_lora_rank=None, first_k_dense_replace=1, n_group=4,
        topk_group=2, routed_scaling_factor=1.5, norm_topk_prob=False), {
            "*": T.Q8_0, "router": T.F16, "attn_kv_b": T.Q8_0, "output": T.Q8_0,
            "ffn_gate_exps": T.Q5_K, "ffn_up_exps": T.Q4_K, "ffn_down_exps": T.Q6_K}, 17,
        groups=True))
    # DeepSeek-V2 (as llama.cpp converts V2, V2-Lite and V2.5): softmax router scores with no
    # correction bias, chosen among all experts (conversions write no groups), weights scaled
    # and not renormalised; kv_b whole. (llama.cpp requires attention.q_lora_rank except at
    # V2-Lite's layer count, so the fixture has a low-rank query, as V2 and V2.5 do.)
    out.append(Fixture("deepseek2-v2", "deepseek2", transformers.DeepseekV2Config(
        **{**mla, "head_dim": mla["qk_rope_head_dim"]}, num_hidden_layers=2, q_lora_rank=64,
        first_k_dense_replace=1, topk_method="greedy", n_group=1, topk_group=1,
        routed_scaling_factor=1.5, norm_topk_prob=False), {
            "*": T.Q8_0, "router": T.F32, "attn_kv_b": T.Q8_0, "output": T.Q6_K,
            "ffn_gate_exps": T.Q4_K, "ffn_up_exps": T.Q4_K, "ffn_down_exps": T.Q5_K}, 19))
    # GLM-4.5: q/k/v biases, per-head q/k norms, RoPE over half of each head, a sigmoid router
    # in groups, and a next-token-prediction layer after the others (left out).
    out.append(Fixture("glm4moe-mixed", "glm4moe", transformers.Glm4MoeConfig(
        **common, intermediate_size=512, moe_intermediate_size=256, n_routed_experts=8,
        num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
        first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        partial_rotary_factor=0.5, use_qk_norm=True, attention_bias=True, rope_theta=1000000.0,
        tie_word_embeddings=False), {
            "*": T.Q8_0, "router": T.F16, "token_embd": T.Q6_K, "output": T.Q5_K,
            "1.attn_q": T.Q4_K, "1.attn_output": T.IQ4_XS,
            "ffn_gate_exps": T.Q4_K, "ffn_up_exps": T.Q5_K, "ffn_down_exps": T.Q6_K,
            "ffn_gate_shexp": T.Q4_1, "ffn_up_shexp": T.IQ4_NL, "ffn_down_shexp": T.Q8_0}, 18,
        predict_layers=1))
    # Qwen3-MoE as unsloth's dynamic (UD) low-bit files are: experts in the IQ1 ... IQ3
    # lattice formats, attention in 8 bits and a few 3- and 4-bit matrices.
    out.append(Fixture("qwen3moe-iq", "qwen3moe", transformers.Qwen3MoeConfig(
        **common, intermediate_size=512, moe_intermediate_size=256, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rope_theta=1000000.0, tie_word_embeddings=False), {
            "*": T.Q8_0, "output": T.Q6_K, "router": T.F32, "token_embd": T.Q6_K,
            "0.attn_output": T.IQ4_XS, "1.attn_output": T.IQ3_S,
            "0.ffn_gate_exps": T.IQ1_M, "0.ffn_up_exps": T.IQ1_S, "0.ffn_down_exps": T.IQ2_XXS,
            "1.ffn_gate_exps": T.IQ2_XS, "1.ffn_up_exps": T.IQ2_S, "1.ffn_down_exps": T.IQ3_XXS,
        }, 16))
    return out


def sigmoid_router(f):
    return f.arch in ("deepseek2", "glm4moe") and not softmax_deepseek(f)


def softmax_deepseek(f):
    """DeepSeek-V2's router: softmax scores, no correction bias."""
    return f.config.model_type == "deepseek_v2"


def deepseek_like(f):
    """The routed layers of DeepSeek and GLM-4.5: leading dense layers, shared experts."""
    return f.arch in ("deepseek2", "glm4moe")


def mixtral_fixture(f):
    return f.arch == "llama" and getattr(f.config, "num_local_experts", 0) > 0


def moe_fixture(f):
    return f.arch == "qwen3moe" or deepseek_like(f) or getattr(f.config, "num_local_experts", 0) > 0


def type_for(f, layer, part):
    if layer is not None and f"{layer}.{part}" in f.types:
        return f.types[f"{layer}.{part}"]
    if part == "ffn_gate_inp":
        return f.types.get("router", T.F32)
    return f.types.get(part, f.types.get("*", T.F32))


def experts_of(f, rng, l, b, mp, names, experts, inner, h, gguf_tensors, hf):
    """A layer's experts, fused per matrix as llama.cpp stores them."""
    for part, hf_part, shape, fan_in in (("ffn_gate_exps", names[0], (experts, inner, h), h),
                                         ("ffn_up_exps", names[1], (experts, inner, h), h),
                                         ("ffn_down_exps", names[2], (experts, h, inner), inner)):
        qtype = type_for(f, l, part)
        stored, values = random_tensor(rng, shape, qtype, 1.0 / math.sqrt(fan_in))
        gguf_tensors[b + part + ".weight"] = (stored, qtype)
        for e in range(experts):
            hf[f"{mp}experts.{e}.{hf_part}.weight"] = torch.from_numpy(values[e].copy())


def latent_attention(f, c, rng, l, b, ap, matrix, norm, gguf_tensors, hf):
    """DeepSeek's multi-head latent attention, kv_b whole or split as current llama.cpp does:
    attn_k_b [heads, latent, nope] (each head's key part transposed), attn_v_b [heads, v, latent]."""
    h, nh = c.hidden_size, c.num_attention_heads
    ql, kl = c.q_lora_rank, c.kv_lora_rank
    nope, rope, vd = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
    if ql:
        matrix(b + "attn_q_a.weight", l, "attn_q_a", (ql, h), ap + "q_a_proj.weight", h)
        norm(b + "attn_q_a_norm.weight", ql, ap + "q_a_layernorm.weight")
        matrix(b + "attn_q_b.weight", l, "attn_q_b", (nh * (nope + rope), ql), ap + "q_b_proj.weight", ql)
    else:
        matrix(b + "attn_q.weight", l, "attn_q", (nh * (nope + rope), h), ap + "q_proj.weight", h)
    matrix(b + "attn_kv_a_mqa.weight", l, "attn_kv_a_mqa", (kl + rope, h), ap + "kv_a_proj_with_mqa.weight", h)
    norm(b + "attn_kv_a_norm.weight", kl, ap + "kv_a_layernorm.weight")
    if f.layout.get("split_kv_b"):
        kt, vt = type_for(f, l, "attn_k_b"), type_for(f, l, "attn_v_b")
        k_stored, k_values = random_tensor(rng, (nh, kl, nope), kt, 1.0 / math.sqrt(kl))
        v_stored, v_values = random_tensor(rng, (nh, vd, kl), vt, 1.0 / math.sqrt(kl))
        gguf_tensors[b + "attn_k_b.weight"] = (k_stored, kt)
        gguf_tensors[b + "attn_v_b.weight"] = (v_stored, vt)
        kv_b = np.concatenate([k_values.transpose(0, 2, 1), v_values], axis=1).reshape(nh * (nope + vd), kl)
        hf[ap + "kv_b_proj.weight"] = torch.from_numpy(np.ascontiguousarray(kv_b))
    else:
        matrix(b + "attn_kv_b.weight", l, "attn_kv_b", (nh * (nope + vd), kl), ap + "kv_b_proj.weight", kl)
    matrix(b + "attn_output.weight", l, "attn_output", (h, nh * vd), ap + "o_proj.weight", nh * vd)


def build(f, tok):
    """The GGUF tensors (name -> (stored array, qtype)) and the matching transformers model."""
    c = f.config
    rng = np.random.default_rng(f.seed)
    h, hd, nh, nkv = c.hidden_size, c.head_dim, c.num_attention_heads, c.num_key_value_heads
    gguf_tensors = {}
    hf = {}
    # (transformers 5 gives every MoE config num_local_experts, as an alias.)
    mixtral = f.arch == "llama" and getattr(c, "num_local_experts", 0) > 0
    moe = f.arch == "qwen3moe" or mixtral
    experts = (getattr(c, "num_experts", None) or getattr(c, "num_local_experts", 0)
               or getattr(c, "n_routed_experts", 0))
    inner = c.intermediate_size if mixtral else getattr(c, "moe_intermediate_size", 0)
    first_dense = c.first_k_dense_replace if deepseek_like(f) else 0

    def matrix(name, layer, part, shape, hf_name, fan_in, gain=1.0, transform=None):
        qtype = type_for(f, layer, part)
        stored, values = random_tensor(rng, shape, qtype, gain / math.sqrt(fan_in))
        gguf_tensors[name] = (stored, qtype)
        v = torch.from_numpy(values.copy())
        hf[hf_name] = transform(v) if transform else v

    def norm(name, n, hf_name):
        values = (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)
        gguf_tensors[name] = (values, T.F32)
        hf[hf_name] = torch.from_numpy(values.copy())

    matrix("token_embd.weight", None, "token_embd", (c.vocab_size, h), "model.embed_tokens.weight", h)
    if not c.tie_word_embeddings:
        matrix("output.weight", None, "output", (c.vocab_size, h), "lm_head.weight", h)
    norm("output_norm.weight", h, "model.norm.weight")
    def layer(l):
        b, p = f"blk.{l}.", f"model.layers.{l}."
        norm(b + "attn_norm.weight", h, p + "input_layernorm.weight")
        # GLM-4.5's converter names the second norm as the attention's.
        norm(b + ("post_attention_norm.weight" if f.arch == "glm4moe" else "ffn_norm.weight"), h,
             p + "post_attention_layernorm.weight")
        llama = f.arch == "llama"
        if f.arch == "deepseek2":
            latent_attention(f, c, rng, l, b, p + "self_attn.", matrix, norm, gguf_tensors, hf)
        else:
            matrix(b + "attn_q.weight", l, "attn_q", (nh * hd, h), p + "self_attn.q_proj.weight", h,
                   transform=(lambda w: unpermute(w, nh)) if llama else None)
            matrix(b + "attn_k.weight", l, "attn_k", (nkv * hd, h), p + "self_attn.k_proj.weight", h,
                   transform=(lambda w: unpermute(w, nkv)) if llama else None)
            matrix(b + "attn_v.weight", l, "attn_v", (nkv * hd, h), p + "self_attn.v_proj.weight", h)
            matrix(b + "attn_output.weight", l, "attn_output", (h, nh * hd), p + "self_attn.o_proj.weight", nh * hd)
        if f.arch.startswith("qwen3") or f.arch == "glm4moe":
            norm(b + "attn_q_norm.weight", hd, p + "self_attn.q_norm.weight")
            norm(b + "attn_k_norm.weight", hd, p + "self_attn.k_norm.weight")
        if getattr(c, "attention_bias", False) and f.arch == "glm4moe":
            for part, rows in (("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd)):
                values = (0.1 * rng.standard_normal(rows)).astype(np.float32)
                gguf_tensors[f"{b}attn_{part}.bias"] = (values, T.F32)
                hf[f"{p}self_attn.{part}_proj.bias"] = torch.from_numpy(values.copy())
        if deepseek_like(f) and l >= first_dense:
            mp = p + "mlp."
            matrix(b + "ffn_gate_inp.weight", l, "ffn_gate_inp", (experts, h), mp + "gate.weight", h, 2.0)
            if sigmoid_router(f):
                bias = (0.1 * rng.standard_normal(experts)).astype(np.float32)
                gguf_tensors[b + "exp_probs_b.bias"] = (bias, T.F32)
                hf[mp + "gate.e_score_correction_bias"] = torch.from_numpy(bias.copy())
            experts_of(f, rng, l, b, mp, ("gate_proj", "up_proj", "down_proj"), experts, inner, h,
                       gguf_tensors, hf)
            shared = inner * c.n_shared_experts
            for part, hf_part, shape, fan_in in (("ffn_gate_shexp", "gate_proj", (shared, h), h),
                                                 ("ffn_up_shexp", "up_proj", (shared, h), h),
                                                 ("ffn_down_shexp", "down_proj", (h, shared), shared)):
                matrix(b + part + ".weight", l, part, shape, mp + "shared_experts." + hf_part + ".weight", fan_in)
        elif moe:
            mp = p + ("block_sparse_moe." if mixtral else "mlp.")
            matrix(b + "ffn_gate_inp.weight", l, "ffn_gate_inp", (experts, h), mp + "gate.weight", h, 2.0)
            names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
            experts_of(f, rng, l, b, mp, names, experts, inner, h, gguf_tensors, hf)
        else:
            for part, hf_part, shape, fan_in in (("ffn_gate", "gate_proj", (c.intermediate_size, h), h),
                                                 ("ffn_up", "up_proj", (c.intermediate_size, h), h),
                                                 ("ffn_down", "down_proj", (h, c.intermediate_size),
                                                  c.intermediate_size)):
                matrix(b + part + ".weight", l, part, shape, p + "mlp." + hf_part + ".weight", fan_in)

    for l in range(c.num_hidden_layers):
        layer(l)

    # Next-token-prediction layers, as GLM-4.5's files hold them: a whole layer and the
    # nextn tensors, in the file only (the reader must leave them out; transformers does not
    # run them either).
    main_hf, hf = hf, {}
    for l in range(c.num_hidden_layers, c.num_hidden_layers + f.layout.get("predict_layers", 0)):
        layer(l)
        b = f"blk.{l}.nextn."
        for name in ("enorm.weight", "hnorm.weight", "shared_head_norm.weight"):
            norm(b + name, h, name)
        matrix(b + "eh_proj.weight", l, "eh_proj", (h, 2 * h), "eh_proj", 2 * h)
    hf = main_hf

    model = transformers.AutoModelForCausalLM.from_config(c, attn_implementation="eager")
    state = model.state_dict()
    if c.tie_word_embeddings:
        hf["lm_head.weight"] = hf["model.embed_tokens.weight"]
    # transformers 5 names Mixtral's sparse block "mlp", and holds a layer's experts fused: gate_up_proj [experts, 2 inner, hidden]
    # (gate rows, then up rows) and down_proj [experts, hidden, inner].
    if mixtral and not any("block_sparse_moe" in k for k in state):
        hf = {k.replace(".block_sparse_moe.", ".mlp."): v for k, v in hf.items()}
    for key in [k for k in state if k.endswith("experts.gate_up_proj")]:
        prefix = key[: -len("gate_up_proj")]
        gate, up, down = (("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj"))
        take = lambda part: [hf.pop(f"{prefix}{e}.{part}.weight") for e in range(experts)]
        hf[key] = torch.stack([torch.cat([g, u]) for g, u in zip(take(gate), take(up))])
        hf[prefix + "down_proj"] = torch.stack(take(down))
    missing = set(state) - set(hf)
    assert not missing, missing
    model.load_state_dict(hf, strict=True)
    model.eval()
    return gguf_tensors, model


def check_names(f, tensors):
    """Every tensor name is one gguf-py lists for the architecture, as llama.cpp reads it."""
    arch = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[f.arch]
    known = set()
    for t in gguf.MODEL_TENSORS[arch]:
        for l in range(f.config.num_hidden_layers + f.layout.get("predict_layers", 0)):
            known.add(gguf.TENSOR_NAMES[t].format(bid=l))
    for name in tensors:
        base = name.rsplit(".", 1)[0]
        assert base in known, (f.name, name, "is not a tensor llama.cpp names for", f.arch)


def write_gguf(path, f, tensors, tok):
    c = f.config
    w = gguf.GGUFWriter(path, f.arch)
    w.add_name(f.name)
    w.add_block_count(c.num_hidden_layers + f.layout.get("predict_layers", 0))
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    if f.arch == "deepseek2":
        kl, rope = c.kv_lora_rank, c.qk_rope_head_dim
        if f.layout.get("split_kv_b"):  # one head of [latent | rotary key], values the latent
            w.add_head_count_kv(1)
            w.add_key_length(kl + rope)
            w.add_value_length(kl)
            w.add_key_length_mla(c.qk_nope_head_dim + rope)
            w.add_value_length_mla(c.v_head_dim)
        else:
            w.add_head_count_kv(c.num_attention_heads)
            w.add_key_length(c.qk_nope_head_dim + rope)
            w.add_value_length(c.v_head_dim)
        w.add_rope_dimension_count(rope)
        if c.q_lora_rank:
            w.add_q_lora_rank(c.q_lora_rank)
        w.add_kv_lora_rank(kl)
    else:
        w.add_head_count_kv(c.num_key_value_heads)
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
        w.add_rope_dimension_count(int(c.head_dim * getattr(c, "partial_rotary_factor", 1.0)))
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    scaling = getattr(c, "rope_scaling", None)
    if scaling and scaling.get("rope_type", scaling.get("type")) == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(scaling["factor"])
        w.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_log_mul(0.1 * scaling["mscale_all_dim"])
    if deepseek_like(f):
        w.add_leading_dense_block_count(c.first_k_dense_replace)
        w.add_expert_count(c.n_routed_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
        w.add_expert_shared_count(c.n_shared_experts)
        w.add_expert_weights_scale(c.routed_scaling_factor)
        w.add_expert_weights_norm(c.norm_topk_prob)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX if softmax_deepseek(f)
                                 else gguf.ExpertGatingFuncType.SIGMOID)
        if f.layout.get("groups"):
            w.add_expert_group_count(c.n_group)
            w.add_expert_group_used_count(c.topk_group)
        if f.layout.get("predict_layers"):
            w.add_nextn_predict_layers(f.layout["predict_layers"])
    elif f.arch == "qwen3moe":
        w.add_expert_count(c.num_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
    elif getattr(c, "num_local_experts", 0):
        w.add_expert_count(c.num_local_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
    w.add_vocab_size(c.vocab_size)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    tokens = [None] * tok.get_vocab_size()
    for text, i in vocab.items():
        tokens[i] = text
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for added in spec["added_tokens"]:
        tokens[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL if added["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    eos = tok.token_to_id("<|endoftext|>")
    w.add_bos_token_id(eos)
    w.add_eos_token_id(tok.token_to_id("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, (stored, qtype) in tensors.items():
        if qtype in (T.F32, T.F16):
            w.add_tensor(name, stored)
        elif qtype == T.BF16:  # as bytes, which gguf-py reads as the byte shape of BF16
            w.add_tensor(name, stored.view(np.uint8), raw_dtype=qtype)
        else:
            w.add_tensor(name, stored, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def record(model, tok):
    out = []
    for text in PROMPTS:
        ids = tok.encode(text).ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            seq, greedy, margins = list(ids), [], []
            for _ in range(GREEDY_TOKENS):
                step = model(torch.tensor([seq])).logits[0, -1].float()
                top = torch.topk(step, 2).values
                # How clear each choice is, as a share of the logits' range: where 8-bit
                # activations may tip a near tie, the test stops comparing.
                margins.append(float((top[0] - top[1]) / (step.max() - step.min())))
                nxt = int(step.argmax())
                greedy.append(nxt)
                seq.append(nxt)
        out.append({"text": text, "ids": ids, "logits": [float(x) for x in logits], "greedy": greedy,
                    "greedy_margins": margins})
    return out


def llama_cpp_tool(root, build):
    """Compiles tests/tools/llama_logits.cpp against the llama.cpp (or ik_llama.cpp) checkout
    `root` and its build folder `build`; returns the program and a name for the build."""
    header = os.path.join(root, "include", "llama.h")
    ik = "fused_moe_up_gate" in open(header).read()
    out = os.path.join(tempfile.mkdtemp(), "llama_logits")
    libs = [os.path.join(build, "src"), os.path.join(build, "ggml", "src"), os.path.join(build, "bin")]
    subprocess.run(["g++", "-O2", "-std=c++17", *(["-DIK_LLAMA"] if ik else []),
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama_logits.cpp"),
                    "-I" + os.path.join(root, "include"), "-I" + os.path.join(root, "ggml", "include"),
                    *["-L" + d for d in libs], "-lllama", "-lggml",
                    "-Wl,-rpath," + ":".join(libs), "-o", out], check=True)
    commit = subprocess.run(["git", "-C", root, "log", "-1", "--format=%h %cs"], capture_output=True,
                            text=True).stdout.strip() or "unknown commit"
    return out, f"{'ik_llama.cpp' if ik else 'llama.cpp'} {commit}"


def llama_cpp_logits(tool, path, prompts):
    """llama.cpp's last-position logits for each prompt, or the reason it gives for refusing
    the file (it reads some architectures only at the released models' sizes)."""
    ids = "".join(" ".join(map(str, p["ids"])) + "\n" for p in prompts)
    run = subprocess.run([tool, path], input=ids, capture_output=True, text=True)
    if run.returncode != 0:
        lines = [l for l in run.stderr.splitlines() if "error" in l.lower() or "Detected" in l]
        return None, (lines[0] if lines else run.stderr.strip().splitlines()[-1]).strip()
    return [[float(x) for x in line.split()] for line in run.stdout.splitlines()], None


# Where a llama.cpp build is known to compute a fixture's architecture wrongly, its logits
# are recorded but are no oracle.
KNOWN_FAULTS = {
    ("ik_llama.cpp", "mixtral"): "its llama graph adds the normalised input instead of the "
    "residual after the experts (build_llama passes add_input with the normed tensor); "
    "transformers computing that way agrees with it to 0.5%",
}


def relative(a, b):
    a, b = np.array(a), np.array(b)
    return float(np.abs(a - b).max() / (a.max() - a.min()))


def main():
    verify = "--verify" in sys.argv
    # --llama-cpp ROOT BUILD: llama.cpp's logits as the second oracle (required to write).
    llama = None
    if "--llama-cpp" in sys.argv:
        at = sys.argv.index("--llama-cpp")
        llama = llama_cpp_tool(sys.argv[at + 1], sys.argv[at + 2])
    elif not verify:
        sys.exit("give --llama-cpp ROOT BUILD (a llama.cpp or ik_llama.cpp checkout and its build "
                 "folder): the fixtures record its logits beside transformers'.")
    # --only NAME[,NAME]: write (or verify) those fixtures alone, leaving the others' files.
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    torch.manual_seed(0)
    tok = build_tokenizer(320)
    os.makedirs(OUT, exist_ok=True)
    for f in fixtures(tok.get_vocab_size()):
        if only and f.name not in only:
            continue
        eos = tok.token_to_id("<|endoftext|>")
        f.config.bos_token_id = eos
        f.config.eos_token_id = [tok.token_to_id("<|im_end|>")]
        tensors, model = build(f, tok)
        check_names(f, tensors)
        expected = record(model, tok)
        path = os.path.join(OUT, f.name + ".gguf")
        if verify:
            with open(os.path.join(OUT, f.name + ".json")) as j:
                stored = json.load(j)["prompts"]
            for got, want in zip(expected, stored):
                assert got["ids"] == want["ids"] and got["greedy"] == want["greedy"], f.name
                diff = np.abs(np.array(got["logits"]) - np.array(want["logits"])).max()
                assert diff < 1e-4, (f.name, diff)
        else:
            write_gguf(path, f, tensors, tok)
        # transformers' own GGUF loader, where it has one, must compute the same.
        # Not for experts: its reader (4.57) has no Mixtral, and for Qwen3-MoE it ignores
        # expert_feed_forward_length and norm_topk_prob and does not split the experts.
        if not moe_fixture(f):
            # (Its Qwen3 reader ignores attention.key_length: head_dim is given.)
            loaded = transformers.AutoModelForCausalLM.from_pretrained(
                OUT, gguf_file=f.name + ".gguf", attn_implementation="eager",
                head_dim=f.config.head_dim, **{"dtype" if TF5 else "torch_dtype": torch.float32}).eval()
            with torch.no_grad():
                ids = torch.tensor([expected[0]["ids"]])
                diff = (loaded(ids).logits[0, -1] - model(ids).logits[0, -1]).abs().max().item()
            assert diff < 1e-3, (f.name, "transformers' GGUF loader differs by", diff)
        # llama.cpp on the same file: its logits beside transformers' (the test holds Tandem
        # to both), and how far the two oracles are apart.
        second = None
        if llama:
            logits, refused = llama_cpp_logits(llama[0], path, expected)
            second = {"build": llama[1]}
            if refused:
                second["refused"] = refused
                print(f"  {llama[1]} does not load {f.name}: {refused}")
            else:
                second["logits"] = logits
                apart = [relative(p["logits"], l) for p, l in zip(expected, logits)]
                second["relative_to_transformers"] = apart
                print(f"  {llama[1]} and transformers differ by {max(apart):.4f} of the range")
                family = "mixtral" if mixtral_fixture(f) else f.arch
                fault = KNOWN_FAULTS.get((llama[1].split()[0], family))
                if fault:
                    second["not_an_oracle"] = fault
                else:
                    assert max(apart) < 0.1, (f.name, "llama.cpp and transformers disagree")
        if verify and second and "logits" in second:
            with open(os.path.join(OUT, f.name + ".json")) as j:
                stored = json.load(j).get("llama_cpp", {})
            if "logits" in stored:
                diff = max(relative(a, b) for a, b in zip(stored["logits"], second["logits"]))
                assert diff < 1e-3, (f.name, "llama.cpp's logits moved by", diff)
        if not verify:
            with open(os.path.join(OUT, f.name + ".json"), "w") as j:
                json.dump({"fixture": f.name, "architecture": f.arch,
                           "oracle": f"transformers {transformers.__version__}, torch "
                                     f"{torch.__version__}, gguf-py {importlib.metadata.version('gguf')}",
                           "formats": sorted({q.name for _, q in tensors.values()}),
                           "prompts": expected, "llama_cpp": second}, j)
        print(f"{f.name}: {os.path.getsize(path) / 1e6:.2f} MB, greedy {expected[0]['greedy'][:8]}"
              f"{' (verified)' if verify else ''}")


if __name__ == "__main__":
    main()
