#!/usr/bin/env python3
"""How far transformers' own logits for the Qwen3-Next fixture move when in_proj_qkvz alone is
rounded to BF16: the reason tst_reference_engine holds Qwen3-Next's packed formats to a lower
greedy agreement than the other families (see packedFormatsStayClose_data).

Run by developers:  python3 tests/tools/qwen3_next_sensitivity.py
Needs: torch, transformers (pip). Prints, per position of one prompt, the largest logit change
as a fraction of the logits' range.
"""
import os

import torch
import transformers

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "models",
                       "qwen3-next")


def main():
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURE, dtype=torch.float32).eval()
    ids = torch.tensor([[1, 5, 9, 13, 2, 7, 30, 41, 77, 12, 150, 3]])
    with torch.no_grad():
        exact = model(ids).logits[0]
        for name, p in model.named_parameters():
            if "in_proj_qkvz" in name:
                p.copy_(p.to(torch.bfloat16).float())
        rounded = model(ids).logits[0]
    spread = exact.max(dim=-1).values - exact.min(dim=-1).values
    moved = (exact - rounded).abs().max(dim=-1).values / spread
    print("largest change / range per position:", [round(x, 4) for x in moved.tolist()])
    print("worst: %.1f%%" % (100 * moved.max().item()))


if __name__ == "__main__":
    main()
