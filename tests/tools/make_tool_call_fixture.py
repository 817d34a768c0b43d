#!/usr/bin/env python3
"""Builds tests/data/models/tool-caller: a one-layer Llama whose weights are set by hand so
that, greedily, it answers every chat with one tool call in Qwen3's (Hermes) format:

    <tool_call>\n{"name": "get_weather", "arguments": {"location": "Tokyo"}}\n</tool_call><|im_end|>

Its layer's projections are zero, so each position's logits depend on its own token alone:
the generation prompt's last token ("\\n") leads to <tool_call>, that to the call's body (one
added token), that to </tool_call>, and that to <|im_end|>, the end of the turn. It lets the
local server's tests see a real tool call come out of the real engine, tokenizer and
template. The chat template is Qwen3's own (tests/data/chat-templates, from llama.cpp's
collection). transformers checks the greedy reply before the files are written.

Run by developers, not by CI:  python3 tests/tools/make_tool_call_fixture.py
Needs: torch, transformers, tokenizers (pip).
"""
import json
import os
import shutil

import torch
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "models", "tool-caller")
TEMPLATE = os.path.join(HERE, "..", "data", "chat-templates", "templates", "Qwen-Qwen3-0.6B.jinja")
CALL_BODY = '\n{"name": "get_weather", "arguments": {"location": "Tokyo"}}\n'
REPLY = "<tool_call>" + CALL_BODY + "</tool_call>"


def main():
    # Byte-level BPE over the 256 bytes alone, and the tokens the reply is made of.
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t in ["<tool_call>", "</tool_call>", "<think>", "</think>", CALL_BODY]])
    ids = {t: tok.token_to_id(t) for t in specials + ["<tool_call>", "</tool_call>", CALL_BODY]}
    newline = tok.encode("\n").ids
    assert len(newline) == 1, newline
    newline = newline[0]
    vocab_size = tok.get_vocab_size()

    hidden = 32
    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        torch_dtype="float32")
    model = transformers.LlamaForCausalLM(config)
    # Each token's embedding is one direction: its own for the four that lead somewhere,
    # a shared one for every other token (which leads to the end of the turn).
    chain = [newline, ids["<tool_call>"], ids[CALL_BODY], ids["</tool_call>"], ids["<|im_end|>"]]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        emb = model.model.embed_tokens.weight
        other = len(chain) - 1
        emb[:, other] = 1.0
        for k, token in enumerate(chain[:-1]):
            emb[token].zero_()
            emb[token, k] = 1.0
        for layer in model.model.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        model.model.norm.weight.fill_(1.0)
        head = model.lm_head.weight
        for k in range(len(chain) - 1):
            head[chain[k + 1], k] = 1.0
        head[ids["<|im_end|>"], other] = 1.0

    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    model.save_pretrained(OUT, safe_serialization=True)
    tok.save(os.path.join(OUT, "tokenizer.json"))
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    with open(os.path.join(OUT, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None,
                   "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "add_bos_token": False, "chat_template": template}, f, indent=1)

    # The oracle: transformers, with this folder's own tokenizer and template.
    hf_tok = transformers.AutoTokenizer.from_pretrained(OUT)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(OUT)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"location": {"type": "string"}}}}}]
    prompt = hf_tok.apply_chat_template([{"role": "user", "content": "Weather in Tokyo?"}],
                                        tools=tools, add_generation_prompt=True,
                                        return_tensors="pt")
    if not torch.is_tensor(prompt):
        prompt = prompt["input_ids"]
    out = loaded.generate(prompt, max_new_tokens=8, do_sample=False)
    reply = hf_tok.decode(out[0, prompt.shape[1]:], skip_special_tokens=False)
    assert reply == REPLY + "<|im_end|>", repr(reply)
    print(f"wrote {OUT}: transformers {transformers.__version__} replies {reply!r}")


if __name__ == "__main__":
    main()
