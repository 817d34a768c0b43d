#!/usr/bin/env python3
"""Builds the tokenizer.json fixture of tst_tokenizer and its reference ids.

Trains a tiny byte-level BPE (about 500 tokens) shaped like Qwen2's tokenizer: NFC
normalizer, a Split pre-tokenizer with Qwen2's regex followed by ByteLevel without regex,
and chat special tokens. The Hugging Face `tokenizers` library is the oracle: the ids it
gives for a set of awkward strings are written to expected.json, and the C++ tokenizer
must reproduce them exactly.

Usage: pip install tokenizers && python3 tests/tools/make_tokenizer_fixture.py
Writes tests/data/tokenizer/bpe-fixture/ and bpe-fixture-string-merges/ (the same
tokenizer with merges written "a b" instead of ["a", "b"]).
"""
import json
import pathlib

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizer"

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Training text: short, varied, so that merges exist for English words, code, numbers,
# accented Latin, Cyrillic and CJK.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.",
    "We're sure they'll say it's fine, but I'd rather check what you've done.",
    "def tokenize(text):\n    return [token for token in text.split()]\n",
    "for (int i = 0; i < 10; ++i) { total += values[i]; }",
    "In 2024 the model read 1234567 tokens at 42.5 tokens per second.",
    "Crème brûlée, café, naïve façade, Zürich, São Paulo, Ångström.",
    "Привет, мир! Как дела? Всё хорошо.",
    "你好，世界。今天天气很好。我们去公园吧。",
    "こんにちは、世界。カタカナとひらがな。",
    "Emoji: 🦙 llama, 👍 yes, 🎉 party, ❤️ love.",
    "<|im_start|>user\nHello there!<|im_end|>\n<|im_start|>assistant\nHi!<|im_end|>",
    "    indented line\n\tTabbed line\n\n\nThree newlines above.",
    "the the the and and of of to to in in is is it it",
    "Mixture of experts: a router picks the top experts for every token.",
] * 20

CASES = [
    "Hello world",
    " Hello world",
    "Hello, y'all! How're you? I'M FINE, we'll SEE.",
    "3",
    "33",
    "12345678",
    "version 3.14159 and 2024-06-01",
    "   leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    "\n",
    "\n\n\n",
    "\t\tindented\n\tcode",
    "line one\r\nline two",
    "Cre\u0300me bru\u0302le\u0301e",  # decomposed accents: NFC composes them first
    "Crème brûlée",
    "Привет, мир!",
    "你好，世界",
    "こんにちは",
    "🦙",
    "🦙🦙 llamas 👍🏽 ❤️",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "<|endoftext|>",
    "text<|im_end|>more text",
    "<|im_start|><|im_end|>",
    "<think>reasoning</think>",
    "def f(x):\n    return x ** 2  # square",
    "!!!!!!",
    "''''''```````\"\"\"\"......",
    "",
    " ",
    "zzzz qqqq xyzzy",
]


def build():
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    # A non-special added token: matched as a whole even when specials are not parsed.
    tokenizer.add_tokens([AddedToken("<think>", special=False, normalized=False)])
    tokenizer.add_tokens([AddedToken("</think>", special=False, normalized=False)])
    return tokenizer


def main():
    tokenizer = build()
    pair_dir = ROOT / "bpe-fixture"
    string_dir = ROOT / "bpe-fixture-string-merges"
    pair_dir.mkdir(parents=True, exist_ok=True)
    string_dir.mkdir(parents=True, exist_ok=True)

    document = json.loads(tokenizer.to_str())
    merges = document["model"]["merges"]
    assert merges and isinstance(merges[0], list), "tokenizers >= 0.20 writes merges as pairs"
    (pair_dir / "tokenizer.json").write_text(json.dumps(document, ensure_ascii=False, indent=1))

    legacy = json.loads(json.dumps(document))
    legacy["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    legacy_text = json.dumps(legacy, ensure_ascii=False, indent=1)
    (string_dir / "tokenizer.json").write_text(legacy_text)
    legacy_tokenizer = Tokenizer.from_str(legacy_text)

    config = {
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "add_eos_token": False,
    }
    for folder in (pair_dir, string_dir):
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")

    expected = []
    for text in CASES:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert legacy_tokenizer.encode(text, add_special_tokens=False).ids == ids
        decoded = tokenizer.decode(ids, skip_special_tokens=False)
        expected.append({"text": text, "ids": ids, "decoded": decoded})
    (pair_dir / "expected.json").write_text(
        json.dumps(expected, ensure_ascii=False, indent=1) + "\n"
    )
    print(f"vocab {tokenizer.get_vocab_size()}, {len(merges)} merges, {len(expected)} cases")


if __name__ == "__main__":
    main()
