#!/usr/bin/env python3
"""Builds the tokenizer.json fixture of tst_tokenizer and its reference ids.

Trains a tiny byte-level BPE (about 500 tokens) shaped like Qwen2's tokenizer: NFC
normalizer, a Split pre-tokenizer with Qwen2's regex followed by ByteLevel without regex,
and chat special tokens. The Hugging Face `tokenizers` library is the oracle: the ids it
gives for a set of awkward strings are written to expected.json, and the C++ tokenizer
must reproduce them exactly.

It also trains a SentencePiece-style BPE as Llama 2 and Mistral ship it in
tokenizer.json: spaces written "▁", byte fallback to <0xAB> tokens, in the older form
(Prepend + Replace normalizers) and the newer one (Metaspace pre-tokenizer).

Usage: pip install tokenizers && python3 tests/tools/make_tokenizer_fixture.py
Writes, under tests/data/tokenizer/: bpe-fixture/ and bpe-fixture-string-merges/ (the
same tokenizer with merges written "a b" instead of ["a", "b"]), spm-bpe-fixture/ and
spm-bpe-fixture-metaspace/.
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


SPM_CASES = [
    "Hello world",
    " Hello world",
    "  two leading spaces",
    "trailing ",
    "a  b",
    "\n",
    "tabs\tand\nnewlines",
    "Crème brûlée",
    "🦙 unseen emoji",
    "Ω and 你好 are not in the training text",
    "<s>Hello</s>",
    "text</s> after",
    "",
    " ",
]


def build_spm_style(metaspace):
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if metaspace:
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="▁", prepend_scheme="first", split=False
        )
        tokenizer.decoder = decoders.Sequence(
            [
                decoders.ByteFallback(),
                decoders.Metaspace(replacement="▁", prepend_scheme="first"),
                decoders.Fuse(),
            ]
        )
    else:
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
        )
        tokenizer.decoder = decoders.Sequence(
            [
                decoders.Replace("▁", " "),
                decoders.ByteFallback(),
                decoders.Fuse(),
                decoders.Strip(" ", 1, 0),
            ]
        )
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tokenizer.train_from_iterator([line for line in CORPUS if "<|" not in line], trainer)
    # SentencePiece vocabularies hold one token per byte for characters they lack.
    document = json.loads(tokenizer.to_str())
    vocab = document["model"]["vocab"]
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    return Tokenizer.from_str(json.dumps(document))


def write_spm_style():
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}
    for metaspace, name in ((False, "spm-bpe-fixture"), (True, "spm-bpe-fixture-metaspace")):
        tokenizer = build_spm_style(metaspace)
        folder = ROOT / name
        folder.mkdir(parents=True, exist_ok=True)
        document = json.loads(tokenizer.to_str())
        (folder / "tokenizer.json").write_text(json.dumps(document, ensure_ascii=False, indent=1))
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
        expected = []
        for text in SPM_CASES:
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            decoded = tokenizer.decode(ids, skip_special_tokens=False)
            expected.append({"text": text, "ids": ids, "decoded": decoded})
        (folder / "expected.json").write_text(
            json.dumps(expected, ensure_ascii=False, indent=1) + "\n"
        )
        print(f"{name}: vocab {tokenizer.get_vocab_size()}, {len(expected)} cases")


def main():
    write_spm_style()
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
