#!/usr/bin/env python3
"""Writes a Qwen3-MoE Hugging Face folder (such as the synthetic 8-layer Qwen3-30B-A3B
benchmark model) as a Q8_0 GGUF file laid out as llama.cpp's converter lays it out, for
`tandem bench -m FILE.gguf` beside llama-bench on the same file (docs/benchmarks.md).
Benchmarks only: the vocabulary is a stand-in (numbered tokens, no merges), enough for
llama.cpp to load the file (one merge, since it refuses none); text generated from it means
nothing.

    /path/to/venv/bin/python tests/tools/make_bench_gguf.py FOLDER OUT.gguf
Needs: gguf (0.19.0) and numpy. A Q4_K_M file is then made with
llama.cpp's llama-quantize --allow-requantize OUT.gguf OUT-Q4_K_M.gguf Q4_K_M.
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants


def safetensors_index(path):
    """name -> (path, dtype, shape, byte offset) of each tensor in one .safetensors file."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    start = 8 + length
    return {name: (path, t["dtype"], t["shape"], start + t["data_offsets"][0])
            for name, t in header.items() if name != "__metadata__"}


def read_tensor(entry):
    """One tensor as float32; BF16 widened by hand, since numpy has no bfloat16."""
    path, dtype, shape, offset = entry
    count = int(np.prod(shape))
    if dtype == "BF16":
        raw = np.fromfile(path, dtype=np.uint16, count=count, offset=offset)
        values = (raw.astype(np.uint32) << 16).view(np.float32)
    elif dtype in ("F32", "F16"):
        values = np.fromfile(path, dtype=np.float32 if dtype == "F32" else np.float16,
                             count=count, offset=offset).astype(np.float32)
    else:
        raise SystemExit(f"unsupported safetensors dtype {dtype}")
    return values.reshape(shape)


def main():
    folder, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    assert c["architectures"] == ["Qwen3MoeForCausalLM"], c["architectures"]
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    where = {}
    for name in files:
        where.update(safetensors_index(os.path.join(folder, name)))

    def tensor(name):
        return read_tensor(where[name])

    w = gguf.GGUFWriter(out, "qwen3moe")
    w.add_name(os.path.basename(folder.rstrip("/")))
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_rope_dimension_count(c["head_dim"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_count(c["num_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    vocab = c["vocab_size"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list([f"<t{i}>" for i in range(vocab)])
    w.add_token_types([gguf.TokenType.NORMAL] * vocab)
    w.add_token_merges(["< t"])  # llama.cpp refuses a BPE vocabulary without merges
    w.add_bos_token_id(c.get("bos_token_id", 0))
    w.add_eos_token_id(c.get("eos_token_id", 0))

    def add(name, values, qtype=T.Q8_0):
        if qtype == T.F32:
            w.add_tensor(name, values.astype(np.float32))
        else:
            w.add_tensor(name, quants.quantize(values, qtype), raw_dtype=qtype)

    add("token_embd.weight", tensor("model.embed_tokens.weight"))
    add("output.weight", tensor("lm_head.weight"))
    add("output_norm.weight", tensor("model.norm.weight"), T.F32)
    for l in range(c["num_hidden_layers"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        add(b + "attn_norm.weight", tensor(p + "input_layernorm.weight"), T.F32)
        add(b + "ffn_norm.weight", tensor(p + "post_attention_layernorm.weight"), T.F32)
        for ours, theirs in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"),
                             ("attn_output", "o_proj")):
            add(b + ours + ".weight", tensor(p + "self_attn." + theirs + ".weight"))
        add(b + "attn_q_norm.weight", tensor(p + "self_attn.q_norm.weight"), T.F32)
        add(b + "attn_k_norm.weight", tensor(p + "self_attn.k_norm.weight"), T.F32)
        add(b + "ffn_gate_inp.weight", tensor(p + "mlp.gate.weight"), T.F32)
        for ours, theirs in (("ffn_gate_exps", "gate_proj"), ("ffn_up_exps", "up_proj"),
                             ("ffn_down_exps", "down_proj")):
            stacked = np.stack([tensor(f"{p}mlp.experts.{e}.{theirs}.weight")
                                for e in range(c["num_experts"])])
            add(b + ours + ".weight", stacked)
        print(f"layer {l} done", flush=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(out, os.path.getsize(out) / 2**30, "GiB")


if __name__ == "__main__":
    main()
