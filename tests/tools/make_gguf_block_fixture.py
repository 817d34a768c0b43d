#!/usr/bin/env python3
"""Writes tests/data/gguf-blocks/<TYPE>.bin: random blocks of each GGUF block format with
gguf-py's dequantisation of them, the oracle the scalar reference dequantiser
(kernels/cpu/gguf/blocks.cpp) is checked against. Each file: uint32 ggml type, uint32 block
count, uint32 weights per block, the blocks' bytes, then the dequantised weights as float32. The fp16 scale fields get
finite values of realistic size (IQ1_M's d, spread over four nibbles, too); every other byte
is random.

    /path/to/venv/bin/python tests/tools/make_gguf_block_fixture.py   (needs: pip install gguf;
    the committed files were made with gguf 0.19.0)
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "gguf-blocks")

# IQ1_M has no fp16 field: its d is the top nibbles of the four 16-bit scale words at byte 48
# (the first word's the lowest).
IQ1_M_SCALE = "iq1_m"

# type: (weights per block, bytes per block, byte offsets of fp16 scale fields)
FORMATS = {
    T.Q4_0: (32, 18, [0]),
    T.Q4_1: (32, 20, [0, 2]),
    T.Q5_0: (32, 22, [0]),
    T.Q5_1: (32, 24, [0, 2]),
    T.Q8_0: (32, 34, [0]),
    T.IQ4_NL: (32, 18, [0]),
    T.Q2_K: (256, 84, [80, 82]),
    T.Q3_K: (256, 110, [108]),
    T.Q4_K: (256, 144, [0, 2]),
    T.Q5_K: (256, 176, [0, 2]),
    T.Q6_K: (256, 210, [208]),
    T.IQ4_XS: (256, 136, [0]),
    T.F16: (1, 2, []),
    T.BF16: (1, 2, []),
    # Last, so that the random stream of the formats above is the one their files were made
    # with.
    T.IQ2_XXS: (256, 66, [0]),
    T.IQ2_XS: (256, 74, [0]),
    T.IQ2_S: (256, 82, [0]),
    T.IQ3_XXS: (256, 98, [0]),
    T.IQ3_S: (256, 110, [0]),
    T.IQ1_S: (256, 50, [0]),
    T.IQ1_M: (256, 56, [IQ1_M_SCALE]),
}
BLOCKS = 6


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261201)
    for t, (weights, size, scales) in FORMATS.items():
        count = BLOCKS * (64 if weights == 1 else 1)
        raw = bytearray(rng.integers(0, 256, size=count * size, dtype=np.uint8).tobytes())
        if t in (T.F16, T.BF16):
            values = rng.normal(0, 1, size=count).astype(np.float32)
            if t == T.F16:
                raw = bytearray(values.astype(np.float16).tobytes())
            else:
                raw = bytearray((values.view(np.uint32) >> 16).astype(np.uint16).tobytes())
        for b in range(count):
            for off in scales:
                value = np.float16(rng.uniform(0.001, 0.1) * rng.choice([-1, 1]))
                if off == IQ1_M_SCALE:
                    bits = int(value.view(np.uint16))
                    for i in range(4):
                        at = b * size + 48 + 2 * i + 1
                        raw[at] = (raw[at] & 0x0F) | (((bits >> (4 * i)) & 0x0F) << 4)
                else:
                    raw[b * size + off:b * size + off + 2] = value.tobytes()
        data = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(-1, size)
        expected = quants.dequantize(data, t).astype(np.float32).reshape(-1)
        assert expected.size == count * weights, (t.name, expected.size)
        assert np.all(np.isfinite(expected)), t.name
        with open(os.path.join(OUT, f"{t.name}.bin"), "wb") as f:
            f.write(struct.pack("<III", int(t), count, weights))
            f.write(bytes(raw))
            f.write(expected.tobytes())
        print(t.name, count, "blocks")


if __name__ == "__main__":
    main()
