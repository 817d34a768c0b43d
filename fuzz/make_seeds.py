#!/usr/bin/env python3
"""Writes the small seed inputs of the fuzz targets that the test fixtures do not provide
in a size fit for fuzzing: tiny safetensors and GGUF files (every metadata type, arrays,
tensors of several types), server requests, tool-call replies and saved distributions.
Standard library only.

    python3 fuzz/make_seeds.py      (writes fuzz/corpus/<target>/)
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def out(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    header, blob = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(kvs, tensors, alignment=32):
    # kvs: (key, type, packed value); tensors: (name, dims, ggml type, data)
    body = struct.pack("<4sIQQ", b"GGUF", 3, len(tensors), len(kvs))
    for key, t, value in kvs:
        body += gstr(key) + struct.pack("<I", t) + value
    offset, datas = 0, []
    for name, dims, t, data in tensors:
        body += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        body += struct.pack("<IQ", t, offset)
        pad = -len(data) % alignment
        datas.append(data + b"\0" * pad)
        offset += len(data) + pad
    body += b"\0" * (-len(body) % alignment)
    return body + b"".join(datas)


def main():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    out("safetensors", "two-tensors.safetensors",
        safetensors({"a.weight": ("F32", [2, 2], f32), "b": ("BF16", [2], b"\x80\x3f\x00\x40")},
                    {"format": "pt"}))
    out("safetensors", "empty.safetensors", safetensors({}))
    out("safetensors", "fp8.safetensors", safetensors({"w": ("F8_E4M3", [4], b"\x38\x40\x48\x50"),
                                                        "s": ("F32", [1], struct.pack("<f", 0.5))}))

    u32 = lambda v: struct.pack("<I", v)
    kvs = [
        ("general.architecture", 8, gstr("llama")),
        ("general.alignment", 4, u32(32)),
        ("llama.block_count", 4, u32(1)),
        ("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        ("general.flag", 7, b"\x01"),
        ("general.small", 0, b"\x05"),
        ("general.signed", 11, struct.pack("<q", -3)),
        ("general.double", 12, struct.pack("<d", 0.25)),
        ("tokenizer.ggml.tokens", 9, u32(8) + struct.pack("<Q", 3) + gstr("a") + gstr("b") + gstr("<s>")),
        ("tokenizer.ggml.scores", 9, u32(6) + struct.pack("<Q", 3) + struct.pack("<3f", 0, -1, -2)),
        ("nested", 9, u32(9) + struct.pack("<Q", 1) + u32(4) + struct.pack("<Q", 2) + u32(1) + u32(2)),
    ]
    q8 = struct.pack("<e", 0.5) + bytes(range(32))
    out("gguf", "tiny.gguf", gguf(kvs, [("token_embd.weight", [4, 1], 0, f32),
                                        ("blk.0.ffn.weight", [32], 8, q8),
                                        ("half", [2], 1, struct.pack("<2e", 1.0, 2.0))]))
    out("gguf", "no-tensors.gguf", gguf(kvs[:3], []))

    # Split sets in gguf_split's input layout: a byte with the part count, the part to open,
    # then every part but the last behind its 4-byte length.
    def split_keys(no, count, tensors):
        return [("split.no", 2, struct.pack("<H", no)), ("split.count", 2, struct.pack("<H", count)),
                ("split.tensors.count", 5, struct.pack("<i", tensors))]

    def split_input(count, open_part, parts):
        data = bytes([count - 1, open_part])
        for p in parts[:-1]:
            data += struct.pack("<I", len(p)) + p
        return data + parts[-1]

    t = [("token_embd.weight", [4, 1], 0, f32), ("blk.0.ffn_up_exps.weight", [32], 8, q8),
         ("output.weight", [2], 1, struct.pack("<2e", 1.0, 2.0))]
    three = [gguf(split_keys(0, 3, 3) + kvs[:3], t[:1]), gguf(split_keys(1, 3, 3), t[1:2]),
             gguf(split_keys(2, 3, 3), t[2:])]
    out("gguf_split", "three-parts.bin", split_input(3, 1, three))
    two = [gguf(split_keys(0, 2, 3) + kvs[:3], t[:2]), gguf(split_keys(1, 2, 3), t[2:])]
    out("gguf_split", "two-parts.bin", split_input(2, 0, two))
    out("gguf_split", "one-file.bin", bytes([0x80, 0]) + gguf(kvs[:3], t))

    # Tiny models for gguf_model: metadata an architecture needs, tensors in block formats
    # (experts fused), so that binding and converting rows are reached.
    def model(arch, layers, experts, types):
        h, heads, kv, hd, inner, vocab = 32, 2, 1, 16, 32, 8
        f32s = lambda n, v=1.0: struct.pack(f"<{n}f", *([v] * n))
        keys = [("general.architecture", 8, gstr(arch))]
        for k, v in (("block_count", layers), ("context_length", 64), ("embedding_length", h),
                     ("feed_forward_length", inner), ("attention.head_count", heads),
                     ("attention.head_count_kv", kv), ("attention.key_length", hd)):
            keys.append((f"{arch}.{k}", 4, u32(v)))
        keys.append((f"{arch}.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-6)))
        if experts:
            keys += [(f"{arch}.expert_count", 4, u32(experts)), (f"{arch}.expert_used_count", 4, u32(1)),
                     (f"{arch}.expert_feed_forward_length", 4, u32(inner))]

        def blocks(qtype, rows, cols):  # rows of zero-ish blocks with a unit scale
            if qtype == 0:
                return [cols, rows], 0, f32s(rows * cols, 0.01)
            size = {8: (32, 34), 12: (256, 144), 2: (32, 18)}[qtype]
            one = struct.pack("<e", 0.01) + (struct.pack("<e", 0.0) if qtype == 12 else b"") + \
                bytes(size[1] - (4 if qtype == 12 else 2))
            return [cols, rows], qtype, one * (rows * cols // size[0])

        ts = [("token_embd.weight", *blocks(types[0], vocab, h)), ("output_norm.weight", [h], 0, f32s(h))]
        for l in range(layers):
            b = f"blk.{l}."
            ts += [(b + "attn_norm.weight", [h], 0, f32s(h)), (b + "ffn_norm.weight", [h], 0, f32s(h)),
                   (b + "attn_q.weight", *blocks(types[1], heads * hd, h)),
                   (b + "attn_k.weight", *blocks(types[1], kv * hd, h)),
                   (b + "attn_v.weight", *blocks(types[1], kv * hd, h)),
                   (b + "attn_output.weight", *blocks(types[1], h, heads * hd))]
            if arch.startswith("qwen3"):
                ts += [(b + "attn_q_norm.weight", [hd], 0, f32s(hd)), (b + "attn_k_norm.weight", [hd], 0, f32s(hd))]
            if experts:
                ts.append((b + "ffn_gate_inp.weight", [h, experts], 0, f32s(h * experts)))
                for part, rows, cols in (("gate", inner, h), ("up", inner, h), ("down", h, inner)):
                    dims, t, data = blocks(types[2], rows * experts, cols)
                    ts.append((b + f"ffn_{part}_exps.weight", [cols, rows, experts], t, data))
            else:
                for part, rows, cols in (("gate", inner, h), ("up", inner, h), ("down", h, inner)):
                    ts.append((b + f"ffn_{part}.weight", *blocks(types[2], rows, cols)))
        return gguf(keys, ts)

    out("gguf_model", "qwen3moe-q8_0.gguf", model("qwen3moe", 2, 2, (8, 8, 8)))
    out("gguf_model", "llama-q4_0.gguf", model("llama", 1, 0, (0, 2, 2)))
    out("gguf_model", "mixtral-f32.gguf", model("llama", 1, 2, (0, 0, 0)))

    requests = {
        "chat.json": {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Hi"}],
                      "temperature": 0.2, "top_p": 0.9, "max_tokens": 8, "stop": ["\n\n"],
                      "stream": True, "stream_options": {"include_usage": True}, "seed": 3},
        "tools.json": {"messages": [{"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                                    {"role": "assistant", "content": None, "tool_calls": [
                                        {"id": "c1", "type": "function",
                                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                                    {"role": "tool", "tool_call_id": "c1", "content": "cold"}],
                       "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
                           "type": "object", "properties": {"city": {"type": "string"}}}}}],
                       "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": False}},
        "completion.json": {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0},
    }
    for name, body in requests.items():
        out("openai_request", name, json.dumps(body))
    replies = {
        "hermes.txt": "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
        "coder.txt": "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
        "glm.txt": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>",
        "deepseek.txt": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "kimi.txt": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|><|tool_calls_section_end|>",
        "harmony.txt": "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}",
    }
    for name, text in replies.items():
        out("openai_request", name, text)
    out("hub_json", "search.json", json.dumps([{"id": "Qwen/Qwen3-30B-A3B", "downloads": 5, "likes": 2,
                                                "pipeline_tag": "text-generation", "tags": ["moe"]}]))
    # Saved distributions (engine/measure/distribution_file.h): 3 records over 8 tokens, one
    # with a token of no probability (FP16 -inf), and one cut short.
    header = json.dumps({"version": 1, "vocab": 8, "context": 4, "text_tokens": 5,
                         "evaluated_tokens": 3, "ids_digest": "0123456789abcdef",
                         "model": "m", "cpu_format": "int8", "kv_cache": "bf16"}).encode()
    head = b"TNDMDIST" + struct.pack("<I", len(header)) + header
    records = b""
    for r in range(3):
        logs = [-2.0794415] * 8 if r != 1 else [0.0] + [float("-inf")] * 7
        largest = max(logs)
        records += struct.pack("<f", largest) + struct.pack("<8e", *[x - largest for x in logs])
    out("saved_distributions", "three-records.tdist", head + records)
    out("saved_distributions", "cut.tdist", head + records[:30])


if __name__ == "__main__":
    main()
