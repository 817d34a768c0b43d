#!/usr/bin/env python3
"""Builds the tiny random checkpoints the reference engine is tested on, and records what
Hugging Face transformers computes for them (the independent oracle).

Run by developers, not by CI:  python3 tests/tools/make_model_fixtures.py [FIXTURE...]
(only the named fixtures, e.g. deepseek-v2; all when none is named)
Needs: torch, transformers==4.57.1, safetensors, tokenizers (pip).
Writes tests/data/models/<fixture>/ with config.json, tokenizer files, safetensors weights
and expected.json (prompt ids, last-position logits, 16 greedy tokens).

Run it again with a transformers 5 release (5.24.0 was used) to write <fixture>-tf5/ for every
family: the same models saved the way transformers 5 saves them (its config spellings:
"rope_parameters", Qwen3-MoE's "num_local_experts"), with its own oracle.
"""
import json
import math
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import save_file
import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "models")
PROMPTS = ["The quick brown fox jumps over the lazy dog.", "Hello, world! 1234 tokens"]
GREEDY_TOKENS = 16
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# gpt-oss's fixture speaks harmony: o200k_harmony's control tokens (names as openai's
# tokenizer.json has them) and the real chat template (tests/data/chat-templates).
HARMONY_TOKENS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
                  "<|start|>", "<|end|>", "<|message|>", "<|call|>"]
HARMONY_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                "chat-templates", "templates", "openai-gpt-oss-120b.jinja")
# A ChatML template written for these fixtures, with an optional thinking block.
CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}\n"
    "{%- for message in messages if message.role != 'system' %}<|im_start|>{{ message.role }}\n"
    "{% if message.role == 'assistant' and message.reasoning_content %}<think>\n{{ message.reasoning_content }}\n"
    "</think>\n\n{% endif %}{{ message.content }}<|im_end|>\n{% endfor %}\n"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
TOKENIZER_TEXT = """Tandem runs large mixture-of-experts models on one workstation.
The quick brown fox jumps over the lazy dog. Hello, world! Numbers: 1234 5678.
Experts that are hot run on the GPU; cold experts run on the CPU with AMX kernels.
"""


def build_tokenizer(vocab_size, specials=None):
    specials = specials or SPECIAL_TOKENS
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(
            pattern=tokenizers.Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
            behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    # Only the characters of the training text form the base alphabet, so every token is
    # ASCII and whatever a random model generates is valid UTF-8 (the chat tests rely on it).
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(specials), show_progress=False)
    tok.train_from_iterator([TOKENIZER_TEXT] * 4, trainer)
    tok.add_special_tokens(specials)
    return tok


def randomize(model, seed):
    """Weights large enough that logits are peaked and routing decisive (no near-ties)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                # gpt-oss keeps its experts as [experts, in, out]; every other matrix (and the
                # fused experts transformers 5 holds for the other families) is [..., out, in].
                gpt_oss = model.config.model_type == "gpt_oss"
                fan_in = p.shape[1] if p.dim() == 3 and gpt_oss else p.shape[-1]
                router = ("gate.weight" in name and "proj" not in name) or "router.weight" in name
                scale = 2.0 if router else 1.0
                p.copy_(torch.randn(p.shape, generator=g) * scale / math.sqrt(fan_in))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
        for name, p in model.named_parameters():
            if name.endswith("_proj.bias"):  # GLM-4.5's attention biases: small, not around 1
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        if model.config.model_type == "qwen3_next":
            for name, p in model.named_parameters():
                # Its RMSNorms scale by 1 + w (the gated one inside the linear attention by w):
                # weights around 0 as trained ones are, not a doubling at every norm.
                if name.endswith("norm.weight") and "linear_attn.norm" not in name:
                    p.copy_(0.2 * torch.randn(p.shape, generator=g))
                # Decay rates that keep a few tokens of memory (exp(-A softplus(dt)) ~ 0.5).
                if name.endswith("A_log"):
                    p.copy_(torch.log(0.2 + 0.6 * torch.rand(p.shape, generator=g)))


def record(model, tok, eos_id):
    out = []
    for text in PROMPTS:
        ids = tok.encode(text).ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            seq = list(ids)
            greedy = []
            for _ in range(GREEDY_TOKENS):
                nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
                greedy.append(nxt)
                seq.append(nxt)
        out.append({"text": text, "ids": ids, "logits": [float(x) for x in logits], "greedy": greedy})
    return out


def quantize_fp8_blockwise(w, block):
    rows, cols = w.shape
    br, bc = math.ceil(rows / block), math.ceil(cols / block)
    scale_inv = torch.empty(br, bc, dtype=torch.float32)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    for i in range(br):
        for j in range(bc):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            s = blk.abs().max().clamp(min=1e-12) / 448.0
            scale_inv[i, j] = s
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = (blk / s).to(torch.float8_e4m3fn)
    deq = q.float()
    for i in range(br):
        for j in range(bc):
            deq[i * block:(i + 1) * block, j * block:(j + 1) * block] *= scale_inv[i, j]
    return q, scale_inv, deq


def quantize_fp8_channel(w):
    # llm-compressor's FP8 "channel" scheme: one scale per output row, stored in bfloat16.
    scale = (w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 448.0).to(torch.bfloat16)
    q = (w / scale.float()).to(torch.float8_e4m3fn)
    return q, scale, q.float() * scale.float()


FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                           -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def quantize_mxfp4(w):
    """[rows, cols] -> OCP MXFP4 as gpt-oss stores it: per row and block of 32 columns, 16
    bytes of FP4 codes (element 2j in byte j's low nibble) and one E8M0 exponent (bias 127)."""
    rows, cols = w.shape
    blocks = w.reshape(rows, cols // 32, 32)
    amax = blocks.abs().amax(dim=-1).clamp(min=1e-30)
    exponent = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scale = torch.pow(2.0, exponent)
    scaled = blocks / scale[..., None]
    codes = (scaled[..., None] - FP4_VALUES).abs().argmin(dim=-1)  # nearest value, first on ties
    deq = FP4_VALUES[codes] * scale[..., None]
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    return packed, (exponent + 127).to(torch.uint8), deq.reshape(rows, cols)


TF5 = int(transformers.__version__.split(".")[0]) >= 5


# Fixture names given on the command line: only those are written (all when none is given).
ONLY = set(sys.argv[1:])


def save_fixture(name, config, seed, storage="float32", shard=None, fp8_block=None):
    if ONLY and name not in ONLY:
        return
    if TF5:
        name += "-tf5"
    folder = os.path.join(ROOT, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    harmony = config.model_type == "gpt_oss"
    tok = build_tokenizer(320, HARMONY_TOKENS if harmony else None)
    assert tok.get_vocab_size() == config.vocab_size, tok.get_vocab_size()
    eos_id = tok.token_to_id("<|endoftext|>")
    if harmony:  # as openai's generation_config: <|return|>, <|endoftext|>, <|call|>
        config.eos_token_id = [tok.token_to_id("<|return|>"), eos_id, tok.token_to_id("<|call|>")]
        config.bos_token_id = tok.token_to_id("<|startoftext|>")
    else:
        config.eos_token_id = [eos_id, tok.token_to_id("<|im_end|>")]
        config.bos_token_id = eos_id
    torch.manual_seed(seed)
    dtype_arg = {"dtype" if TF5 else "torch_dtype": torch.float32}
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", **dtype_arg)
    randomize(model, seed)
    model.eval()

    fp8_tensors = {}
    if storage == "bfloat16":
        # The oracle computes with exactly the weights the file holds.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    elif storage == "float16":
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.float16).float())
    elif storage in ("fp8", "fp8-channel"):
        with torch.no_grad():
            for pname, p in model.named_parameters():
                skip = p.dim() != 2 or "embed_tokens" in pname or "lm_head" in pname or pname.endswith("mlp.gate.weight")
                if skip:
                    continue
                if storage == "fp8":
                    q, s, deq = quantize_fp8_blockwise(p.detach().float(), fp8_block)
                else:
                    q, s, deq = quantize_fp8_channel(p.detach().float())
                p.copy_(deq)
                fp8_tensors[pname] = (q, s)

    mxfp4_tensors = {}
    if storage == "mxfp4":
        # gpt-oss's routed experts, as openai ships them; everything else stays fp32.
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if not (pname.endswith("experts.gate_up_proj") or pname.endswith("experts.down_proj")):
                    continue
                per_expert = []
                for e in range(p.shape[0]):
                    packed, scales, deq = quantize_mxfp4(p[e].detach().float().t().contiguous())
                    p[e].copy_(deq.t())
                    per_expert.append((packed, scales))
                mxfp4_tensors[pname] = (torch.stack([b for b, _ in per_expert]),
                                        torch.stack([s for _, s in per_expert]))

    expected = record(model, tok, eos_id)
    if storage == "mxfp4":
        model.config.quantization_config = {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"]}
        model.config.architectures = [type(model).__name__]
        model.config.save_pretrained(folder)
        model.generation_config.save_pretrained(folder)
        state = {}
        for k, v in model.state_dict().items():
            if k in mxfp4_tensors:
                state[k + "_blocks"] = mxfp4_tensors[k][0].contiguous()
                state[k + "_scales"] = mxfp4_tensors[k][1].contiguous()
            else:
                state[k] = v.float().contiguous()
        save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    elif storage in ("float32", "bfloat16", "float16"):
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[storage]
        model.to(dtype)
        model.save_pretrained(folder, safe_serialization=True, max_shard_size=shard or "100MB")
    else:
        if storage == "fp8":
            model.config.quantization_config = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                                "weight_block_size": [fp8_block, fp8_block]}
            scale_suffix = "_scale_inv"
        else:
            # As llm-compressor writes it for FP8_DYNAMIC (e.g. zai-org/GLM-4.5-Air-FP8).
            model.config.quantization_config = {
                "quant_method": "compressed-tensors", "format": "float-quantized",
                "quantization_status": "compressed", "ignore": ["lm_head", "re:.*mlp.gate$"],
                "config_groups": {"group_0": {
                    "targets": ["Linear"], "output_activations": None,
                    "input_activations": {"dynamic": True, "num_bits": 8, "strategy": "token",
                                          "symmetric": True, "type": "float"},
                    "weights": {"dynamic": False, "num_bits": 8, "observer": "minmax",
                                "strategy": "channel", "symmetric": True, "type": "float"}}}}
            scale_suffix = "_scale"
        model.config.architectures = [type(model).__name__]
        model.config.save_pretrained(folder)
        model.generation_config.save_pretrained(folder)
        state = {}
        for k, v in model.state_dict().items():
            if k in fp8_tensors:
                state[k] = fp8_tensors[k][0].contiguous()
                state[k + scale_suffix] = fp8_tensors[k][1].contiguous()
            else:
                state[k] = v.to(torch.bfloat16).contiguous()
        # The oracle used the non-quantized tensors in fp32; store them exactly.
        for k, v in model.state_dict().items():
            if k not in fp8_tensors:
                state[k] = v.float().contiguous()
        if "lm_head.weight" in state and config.tie_word_embeddings:
            del state["lm_head.weight"]
        save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        if harmony:
            with open(HARMONY_TEMPLATE) as t:
                template = t.read()
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|return|>",
                       "bos_token": "<|startoftext|>", "model_max_length": 256,
                       "chat_template": template}, f, indent=2)
        else:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
                       "bos_token": None, "add_bos_token": False, "model_max_length": 256,
                       "chat_template": CHAT_TEMPLATE}, f, indent=2)
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump({"fixture": name, "storage": storage, "oracle": f"transformers {transformers.__version__}, torch {torch.__version__}",
                   "prompts": expected}, f)
    size = sum(os.path.getsize(os.path.join(folder, x)) for x in os.listdir(folder))
    print(f"{name}: {size / 1e6:.2f} MB, greedy {expected[0]['greedy'][:8]}...")


def main():
    if transformers.__version__ not in ("4.57.1", "5.24.0"):
        print(f"warning: fixtures were made with transformers 4.57.1 and 5.24.0, this is {transformers.__version__}", file=sys.stderr)
    V = build_tokenizer(320).get_vocab_size()  # the text allows fewer merges than asked for
    # The transformers 5 fixtures use a RoPE base other than 10000 (1e6, as Mixtral and Qwen3
    # ship with), so that a reader which misses "rope_parameters" and falls back to 10000 fails.
    common = dict(vocab_size=V, max_position_embeddings=256, rms_norm_eps=1e-6,
                  rope_theta=1000000.0 if TF5 else 10000.0)

    qwen3_moe = transformers.Qwen3MoeConfig(hidden_size=96, num_hidden_layers=3, num_attention_heads=4,
                                            num_key_value_heads=2, head_dim=32, intermediate_size=80,
                                            moe_intermediate_size=40, num_experts=6, num_experts_per_tok=2,
                                            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                                            tie_word_embeddings=False, **common)
    save_fixture("qwen3-moe", qwen3_moe, seed=1)
    if not TF5:
        save_fixture("qwen3-moe-bf16-sharded", transformers.Qwen3MoeConfig(**qwen3_moe.to_dict()), seed=1,
                     storage="bfloat16", shard="150KB")

    mixtral = transformers.MixtralConfig(hidden_size=96, num_hidden_layers=2, num_attention_heads=6,
                                         num_key_value_heads=2, intermediate_size=48, num_local_experts=6,
                                         num_experts_per_tok=2, sliding_window=None, tie_word_embeddings=False,
                                         **common)
    save_fixture("mixtral", mixtral, seed=2)
    if not TF5:
        save_fixture("mixtral-f16", transformers.MixtralConfig(**mixtral.to_dict()), seed=2, storage="float16")

    deepseek = dict(hidden_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                    intermediate_size=112, moe_intermediate_size=32, n_routed_experts=8, n_shared_experts=1,
                    num_experts_per_tok=2, n_group=4, topk_group=2, first_k_dense_replace=1,
                    routed_scaling_factor=2.5, norm_topk_prob=True, kv_lora_rank=32, q_lora_rank=48,
                    qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, rope_interleave=True,
                    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                  "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
                    tie_word_embeddings=False, **common)
    save_fixture("deepseek-v3", transformers.DeepseekV3Config(**deepseek), seed=3)
    if not TF5:
        save_fixture("deepseek-v3-no-q-lora", transformers.DeepseekV3Config(**{**deepseek, "q_lora_rank": None}), seed=4)
        save_fixture("deepseek-v3-fp8", transformers.DeepseekV3Config(**deepseek), seed=3, storage="fp8", fp8_block=32)

    # DeepSeek-V2 (V2-Lite's shape of attention: no low-rank query): softmax router scores,
    # no correction bias, the experts of the best topk_group groups by their best expert
    # ("group_limited_greedy", as V2 and V2.5; one group of four kept here, so that the rule
    # changes the choice), weights not renormalised but scaled.
    deepseek_v2 = dict(hidden_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                       intermediate_size=112, moe_intermediate_size=32, n_routed_experts=8,
                       n_shared_experts=1, num_experts_per_tok=2, topk_method="group_limited_greedy",
                       n_group=2, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
                       norm_topk_prob=False, kv_lora_rank=32, q_lora_rank=None, qk_nope_head_dim=16,
                       qk_rope_head_dim=8, v_head_dim=16, head_dim=8, tie_word_embeddings=False,
                       **common)
    save_fixture("deepseek-v2", transformers.DeepseekV2Config(**deepseek_v2), seed=11)

    qwen3 = transformers.Qwen3Config(hidden_size=80, num_hidden_layers=2, num_attention_heads=5,
                                     num_key_value_heads=1, head_dim=24, intermediate_size=112,
                                     tie_word_embeddings=True, **common)
    save_fixture("qwen3", qwen3, seed=5)

    # GLM-4.5 (Glm4MoeForCausalLM): biased q/k/v, per-head q/k norms, RoPE over the first half
    # of each head, DeepSeek-V3's sigmoid routing with groups, a shared expert, a dense layer.
    glm = transformers.Glm4MoeConfig(hidden_size=96, num_hidden_layers=3, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=32, intermediate_size=112,
                                     moe_intermediate_size=32, n_routed_experts=8, n_shared_experts=1,
                                     num_experts_per_tok=2, n_group=2, topk_group=1,
                                     first_k_dense_replace=1, routed_scaling_factor=2.5,
                                     norm_topk_prob=True, use_qk_norm=True, attention_bias=True,
                                     partial_rotary_factor=0.5, tie_word_embeddings=False,
                                     **{**common, "rms_norm_eps": 1e-5})
    save_fixture("glm4-moe", glm, seed=7)
    if not TF5:
        save_fixture("glm4-moe-fp8", transformers.Glm4MoeConfig(**glm.to_dict()), seed=7, storage="fp8-channel")

    # gpt-oss: sliding-window layers (a window shorter than the prompts) between full ones,
    # attention sinks, biased projections and router, clamped SwiGLU experts stored as MXFP4
    # (the experts' widths are multiples of MXFP4's 32-column blocks), YaRN without truncation.
    V_harmony = build_tokenizer(320, HARMONY_TOKENS).get_vocab_size()
    gpt_oss = transformers.GptOssConfig(
        hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        tie_word_embeddings=False,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                      "truncate": False, "original_max_position_embeddings": 64},
        **{**common, "rms_norm_eps": 1e-5, "rope_theta": 150000.0, "vocab_size": V_harmony})
    save_fixture("gpt-oss", gpt_oss, seed=9, storage="float32" if TF5 else "mxfp4")

    # Qwen3-Next: three gated DeltaNet layers (a causal conv, then the recurrent delta rule,
    # two value heads per key head) before one gated full-attention layer with partial RoPE;
    # Qwen3-MoE's routing with a sigmoid-gated shared expert; one dense layer; norms as 1 + w.
    qwen3_next = transformers.Qwen3NextConfig(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, partial_rotary_factor=0.25, intermediate_size=96, linear_conv_kernel_dim=4,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[1], tie_word_embeddings=False, **common)
    save_fixture("qwen3-next", qwen3_next, seed=10)
    if not TF5:
        # As Qwen's FP8 release: 128-row blocks that its fused projections' parts fill whole
        # (here 16, the parts' size), so the regrouped rows keep their scales.
        save_fixture("qwen3-next-fp8", transformers.Qwen3NextConfig(**qwen3_next.to_dict()), seed=10,
                     storage="fp8", fp8_block=16)

    llama = transformers.LlamaConfig(hidden_size=96, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=4, intermediate_size=160, tie_word_embeddings=False,
                                     rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
                                     **{**common, "rope_theta": 500000.0})
    save_fixture("llama", llama, seed=6)


if __name__ == "__main__":
    main()
