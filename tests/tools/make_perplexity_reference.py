#!/usr/bin/env python3
"""Computes with Hugging Face transformers (the independent oracle) the perplexity of
tests/data/perplexity/fixture-text.txt under the fixture models, and the mean KL divergence
between pairs of them, exactly as `tandem perplexity` defines both: consecutive windows of
CONTEXT tokens, each token after a window's first predicted from those before it in the
window; KL(base || model) averaged over the same positions.

Run by developers, not by CI:  python3 tests/tools/make_perplexity_reference.py
Needs: torch, transformers==4.57.1 (pip). Writes tests/data/perplexity/expected.json.
"""
import json
import math
import os

import torch
import transformers
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
CONTEXT = 48
MODELS = ["qwen3-moe", "qwen3-moe-bf16-sharded", "mixtral", "mixtral-f16", "deepseek-v3", "qwen3", "llama"]
# (model, base): a bf16 copy of the same weights drifts a little, another model a lot.
KL_PAIRS = [("qwen3-moe-bf16-sharded", "qwen3-moe"), ("mixtral", "qwen3-moe")]


def log_probs(folder, ids):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                              attn_implementation="eager")
    model.eval()
    rows = []
    with torch.no_grad():
        for start in range(0, len(ids), CONTEXT):
            window = ids[start:start + CONTEXT]
            if len(window) < 2:
                continue
            logits = model(torch.tensor([window])).logits[0].double()
            rows.append(torch.log_softmax(logits[:-1], dim=-1))
    return rows


def main():
    with open(os.path.join(DATA, "perplexity", "fixture-text.txt"), encoding="utf-8") as f:
        text = f.read()
    folder = lambda name: os.path.join(DATA, "models", name)
    ids = Tokenizer.from_file(os.path.join(folder(MODELS[0]), "tokenizer.json")).encode(
        text, add_special_tokens=False).ids
    targets = [torch.tensor(ids[s + 1:s + CONTEXT]) for s in range(0, len(ids), CONTEXT)
               if len(ids[s:s + CONTEXT]) >= 2]
    rows = {name: log_probs(folder(name), ids) for name in MODELS}
    result = {"oracle": f"transformers {transformers.__version__}, torch {torch.__version__}, float32",
              "context_tokens": CONTEXT, "ids": ids, "perplexity": {}, "kl": []}
    for name in MODELS:
        nll = -sum(r.gather(1, t[:, None]).sum().item() for r, t in zip(rows[name], targets))
        count = sum(len(t) for t in targets)
        result["perplexity"][name] = {"evaluated_tokens": count, "mean_nll": nll / count,
                                      "perplexity": math.exp(nll / count)}
    for model, base in KL_PAIRS:
        kl = sum((b.exp() * (b - m)).sum().item() for m, b in zip(rows[model], rows[base]))
        count = sum(r.shape[0] for r in rows[model])
        result["kl"].append({"model": model, "base": base, "mean_kl": kl / count})
    with open(os.path.join(DATA, "perplexity", "expected.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(json.dumps({k: v for k, v in result.items() if k != "ids"}, indent=1))


if __name__ == "__main__":
    main()
