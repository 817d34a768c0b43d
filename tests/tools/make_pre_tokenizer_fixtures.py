#!/usr/bin/env python3
"""Builds the fixtures of tst_pre_tokenizer_conformance and their reference ids.

Three references, each the library the real models are tokenized with:

* Hugging Face `tokenizers` (0.22): every pre-tokenizer type, split behaviour and
  normalizer a tokenizer.json can name, as variants of two small base tokenizers. Each
  variant is the base with a few fields replaced ("patch"); the C++ test applies the same
  patch and must produce the same ids.
* llama.cpp's named pre-tokenizers (GGUF key tokenizer.ggml.pre): the same base vocabulary
  written as GGUF files by the `gguf` package; the test writes the pre value of each name
  into a copy. The reference ids come from a Hugging Face tokenizer that runs the name's
  regexes as Split steps (what llama.cpp does), or from tiktoken for kimi-k2.
* tiktoken (0.14) for a Kimi-K2-style folder: tiktoken.model, tokenizer_config.json and
  Kimi's split pattern.

The base vocabularies are trained here on a short corpus without any pre-tokenization, so
that merges cross word, digit and punctuation boundaries and every pre-tokenizer changes
ids. Training is deterministic: running the script again gives the same files.

Usage: pip install tokenizers==0.22.* tiktoken==0.14.* gguf==0.19.*
       python3 tests/tools/make_pre_tokenizer_fixtures.py
Writes tests/data/tokenizer/pre-tokenizers/ and tests/data/tokenizer/kimi-tiktoken/.
"""
import base64
import json
import pathlib
import shutil

import gguf
import tiktoken
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizer"
OUT = ROOT / "pre-tokenizers"
KIMI_DIR = ROOT / "kimi-tiktoken"

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.",
    "We're sure they'll say it's fine, but I'd rather check what you've done.",
    "I'M SURE WE'LL SEE. They'Re here, aren't they? Don't.",
    "def tokenize(text):\n    return [token for token in text.split()]\n",
    "for (int i = 0; i < 10; ++i) { total += values[i]; } if (a <= b && c != d) {}",
    "In 2024 the model read 1234567 tokens at 42.5 tokens per second; 3.14159 and 100,000.",
    "12345678901234567890 000 111 222 333 1 22 333 4444 55555",
    "Crème brûlée, café, naïve façade, Zürich, São Paulo, Ångström, İstanbul.",
    "Привет, мир! Как дела? Всё хорошо. Ελληνικά κείμενα εδώ.",
    "你好，世界。今天天气很好。我们去公园吧。中文测试。",
    "こんにちは、世界。カタカナとひらがな。ラーメン。",
    "한국어 텍스트입니다. 안녕하세요.",
    "Emoji: 🦙 llama, 👍 yes, 🎉 party, ❤️ love, 👍🏽 tone.",
    "    indented line\n\tTabbed line\n\n\nThree newlines above.\r\nWindows line.",
    "CamelCaseWords HTTPServer iPhone XMLHttpRequest getX",
    "e-mail: someone@example.com https://example.org/path?q=1&r=2 #tag",
    "!!! ??? ... --- *** ''' ``` \"\"\" ;;; ::: $$$ %%% ^^^",
    "xxxxxxxxxxxxxxxx yyyyyyyy xyxyxyxy",
    "مرحبا بالعالم ١٢٣٤ हिन्दी भाषा ภาษาไทย",
    "the the the and and of of to to in in is is it it",
    "end.\nNext {\n}\n   three   spaces   apart\n  \n  it'sx we'dn't",
] * 8

# Awkward inputs: digits, punctuation runs, whitespace of every kind, CJK, emoji, accents
# (composed and not), newlines, contractions, code, case changes, other scripts.
TEXTS = [
    "Hello world",
    " Hello  world ",
    "I'm can't WE'LL they'Re you'VE",
    "12345678 9 1234567 12.5e-3",
    "x²+y² ½ ١٢٣ Ⅻ",
    "3.14159, 2024-06-01; $1,000,000!!!",
    "...!!!???---",
    "a--b—c…d«e»",
    "\t\ttabs\tand\nnewlines\n\n\n end",
    "line\r\nwindows\r\n",
    "trailing   ",
    "   leading",
    "a  \nb  \n",
    "你好，世界。中文测试",
    "こんにちはカタカナー ひらがな",
    "한국어 텍스트",
    "Привет, мир! Ёлка",
    "Crème brûlée façade",
    "Cre\u0300me bru\u0302le\u0301e",
    "🦙🦙 llamas 👍🏽 ❤️",
    "def f(x):\n    return x ** 2  # square\n",
    "if (a<=b && c!=d) { x += 1; }",
    "CamelCaseWords HTTPServer iPhone",
    "ﬁ ① Ｆｕｌｌ",
    "someone@example.com https://x.y/z?q=1",
    "non\u00a0breaking\u3000space\u2009thin",
    "<|im_start|>user\nHi<|im_end|>",
    "İstanbul ΣΑΣ ǅ",
    "a\u200db zero\u200bwidth",
    "xxxxxxxxxxxx",
    "end.\nNext {\n}",
    "it'sx we'dn't",
    "a    b   c",
    "x  \n  y",
    "مرحبا ١٢٣٤ हिन्दी ภาษาไทย",
    "",
    " ",
    "\n",
]

SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
# Whole words the merges cannot build: with ignore_merges they become one token.
WHOLE_WORDS = [" brûlée", "façade", " llamas", " square", "Crème", " world", "Hello", "世界"]

BYTE_LEVEL_END = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)


def compact(document):
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def byte_level(text):
    return "".join(BYTE_TO_CHAR[b] for b in text.encode("utf-8"))


def _byte_map():
    # GPT-2's printable-byte alphabet, the mapping ByteLevel writes.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = _byte_map()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def with_extras(document, extra_tokens, byte_tokens=False):
    """Adds whole-word tokens (no merge builds them), byte tokens and the specials."""
    vocab = document["model"]["vocab"]
    if byte_tokens:
        for byte in range(256):
            vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    for token in extra_tokens:
        vocab.setdefault(token, len(vocab))
    document["added_tokens"] = [
        {"id": len(vocab) + i, "content": text, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
        for i, text in enumerate(SPECIALS)
    ]
    return document


def train_byte_level_base():
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = BYTE_LEVEL_END
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=900, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    document = json.loads(tokenizer.to_str())
    return with_extras(document, [byte_level(w) for w in WHOLE_WORDS])


def train_space_mark_base():
    tokenizer = Tokenizer(models.BPE(byte_fallback=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), "isolated")
    trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False)
    tokenizer.train_from_iterator(CORPUS, trainer)
    document = json.loads(tokenizer.to_str())
    document["normalizer"] = None
    document["pre_tokenizer"] = None
    document["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    return with_extras(document, ["▁world", "Hello", "\n\n\n"], byte_tokens=True)


def patched(base, patch):
    document = json.loads(json.dumps(base))
    for key, value in patch.items():
        if key.startswith("model."):
            document["model"][key[len("model."):]] = value
        else:
            document[key] = value
    return document


def to_json(component):
    """The JSON of a pre-tokenizer or normalizer object, as tokenizer.json stores it."""
    probe = Tokenizer(models.BPE())
    if isinstance(component, normalizers.Normalizer):
        probe.normalizer = component
        return json.loads(probe.to_str())["normalizer"]
    if isinstance(component, tokenizers.processors.PostProcessor):
        probe.post_processor = component
        return json.loads(probe.to_str())["post_processor"]
    probe.pre_tokenizer = component
    return json.loads(probe.to_str())["pre_tokenizer"]


P = pre_tokenizers
N = normalizers


def seq(*steps):
    return P.Sequence(list(steps))


def behaviours():
    return ["isolated", "removed", "merged_with_previous", "merged_with_next", "contiguous"]


def tokenizer_json_variants():
    """(name, base, patch, add_special) for every pre-tokenizer type and behaviour."""
    v = []

    def pre(name, step, base="byte-level"):
        v.append((name, base, {"pre_tokenizer": to_json(step)}, False))

    pre("whitespace", seq(P.Whitespace(), BYTE_LEVEL_END))
    pre("whitespace-split", seq(P.WhitespaceSplit(), BYTE_LEVEL_END))
    pre("bert", seq(P.BertPreTokenizer(), BYTE_LEVEL_END))
    pre("digits-individual", seq(P.Digits(individual_digits=True), BYTE_LEVEL_END))
    pre("digits-contiguous", seq(P.Digits(individual_digits=False), BYTE_LEVEL_END))
    for behaviour in behaviours():
        pre(f"punctuation-{behaviour}", seq(P.Punctuation(behaviour), BYTE_LEVEL_END))
    pre("char-delimiter-space", seq(P.CharDelimiterSplit(" "), BYTE_LEVEL_END))
    pre("char-delimiter-e", seq(P.CharDelimiterSplit("e"), BYTE_LEVEL_END))
    pre("unicode-scripts", seq(P.UnicodeScripts(), BYTE_LEVEL_END))
    pre("fixed-length-3", seq(P.FixedLength(length=3), BYTE_LEVEL_END))
    for behaviour in behaviours():
        for invert in (False, True):
            name = f"split-regex-{behaviour}" + ("-inverted" if invert else "")
            pre(name, seq(P.Split(Regex(r"\s+|[,.!?]"), behaviour, invert=invert), BYTE_LEVEL_END))
    for behaviour in ("isolated", "removed", "merged_with_next"):
        pre(f"split-string-{behaviour}", seq(P.Split(" ", behaviour), BYTE_LEVEL_END))
    pre("split-string-empty", seq(P.Split("", "isolated"), BYTE_LEVEL_END))
    pre("split-regex-lookahead", seq(P.Split(Regex(r"(?=[A-Z])"), "isolated"), BYTE_LEVEL_END))
    pre("split-regex-digit-groups",
        seq(P.Split(Regex(r"(?=(\d{3})+(?!\d))"), "isolated"), BYTE_LEVEL_END))
    pre("split-regex-line-end", seq(P.Split(Regex(r"\s+$"), "isolated"), BYTE_LEVEL_END))
    pre("split-regex-line-start", seq(P.Split(Regex(r"^."), "isolated"), BYTE_LEVEL_END))
    pre("split-regex-word-boundary", seq(P.Split(Regex(r"\b\w+\b"), "isolated"), BYTE_LEVEL_END))
    pre("split-regex-intersection",
        seq(P.Split(Regex(r"[\p{L}&&[^a-z]]+"), "isolated"), BYTE_LEVEL_END))
    pre("split-regex-hex-posix",
        seq(P.Split(Regex(r"\h+|[[:punct:]]+"), "isolated"), BYTE_LEVEL_END))
    pre("byte-level", P.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True))
    pre("byte-level-no-prefix", P.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=True))
    pre("byte-level-no-regex", P.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=False))
    # Steps after ByteLevel see the byte alphabet: "Ġ" is a space there.
    pre("byte-level-then-split",
        seq(P.ByteLevel(add_prefix_space=False, use_regex=False), P.Split("Ġ", "merged_with_next")))
    pre("digits-then-byte-level",
        seq(P.Digits(individual_digits=True), P.ByteLevel(add_prefix_space=True, use_regex=True)))

    def norm(name, normalizer, step=None, base="byte-level"):
        v.append((name, base, {"normalizer": to_json(normalizer),
                               "pre_tokenizer": to_json(step or seq(P.WhitespaceSplit(), BYTE_LEVEL_END))},
                  False))

    norm("lowercase", N.Lowercase())
    norm("nfkc", N.NFKC())
    norm("nfd-strip-accents", N.Sequence([N.NFD(), N.StripAccents()]))
    norm("strip", N.Strip(left=True, right=True), BYTE_LEVEL_END)
    norm("strip-right", N.Strip(left=False, right=True), BYTE_LEVEL_END)
    norm("bert-normalizer", N.BertNormalizer())
    norm("bert-normalizer-keep-case",
         N.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False,
                          lowercase=False), BYTE_LEVEL_END)
    norm("nmt", N.Nmt(), BYTE_LEVEL_END)
    norm("replace-regex", N.Replace(Regex(r"\s+"), " "), BYTE_LEVEL_END)
    norm("replace-string", N.Replace("l", "L"), BYTE_LEVEL_END)
    norm("prepend", N.Prepend("> "), BYTE_LEVEL_END)
    norm("byte-level-normalizer", N.ByteLevel(), P.Split(Regex("Ġ"), "merged_with_next"))

    def metaspace(name, step, normalizer=None):
        patch = {"pre_tokenizer": to_json(step)}
        if normalizer is not None:
            patch["normalizer"] = to_json(normalizer)
        v.append((name, "space-mark", patch, False))

    for scheme in ("always", "first", "never"):
        for split in (True, False):
            metaspace(f"metaspace-{scheme}" + ("-split" if split else ""),
                      P.Metaspace(replacement="▁", prepend_scheme=scheme, split=split))
    metaspace("whitespace-split-then-metaspace-first",
              seq(P.WhitespaceSplit(), P.Metaspace(prepend_scheme="first")))
    metaspace("strip-then-metaspace-first", P.Metaspace(prepend_scheme="first"),
              N.Strip(left=True, right=True))
    metaspace("digits-then-metaspace-first",
              seq(P.Digits(individual_digits=True), P.Metaspace(prepend_scheme="first")))

    # Characters without a token and without byte fallback: the unknown token, once per run
    # of them in a word when fuse_unk is set.
    for fuse in (True, False):
        v.append(("unknown-" + ("fused" if fuse else "unfused"), "space-mark",
                  {"pre_tokenizer": to_json(P.Metaspace(prepend_scheme="first")),
                   "model.byte_fallback": False, "model.unk_token": "<0x00>",
                   "model.fuse_unk": fuse}, False))

    # Post-processors; main() writes them with the base's ids.
    v.append(("template-processing", "byte-level",
              {"pre_tokenizer": to_json(P.ByteLevel(add_prefix_space=False, use_regex=True)),
               "post_processor": "template"}, True))
    v.append(("roberta-processing", "byte-level",
              {"pre_tokenizer": to_json(P.ByteLevel(add_prefix_space=False, use_regex=True)),
               "post_processor": "roberta"}, True))
    return v


# --- llama.cpp's named pre-tokenizers --------------------------------------------------
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
JAIS2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)"
         r"|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
          r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+{CONTRACTION}|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*{CONTRACTION}"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
ASCII_CONTRACTION = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
YOUTU_WORDS = (rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+{ASCII_CONTRACTION}"
               rf"|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*{ASCII_CONTRACTION}"
               r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
YOUTU_CJK = (r"[\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}"
             r"\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+"
             r"|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+")
BAILING = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*"
           r"|\s*[\r\n]|\s+(?!\S)|\s+")
SEED_CODER = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}"
              r"| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+")
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
EXAONE_MOE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+"
              r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
MINICPM5 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_V3_WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
                     r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPARK25_WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
                 r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+")
HAN_KANA = r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+"
CJK_HANGUL = r"[\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+"
DEEPSEEK_LLM_LETTERS = (
    r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}"
    r"\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}"
    r"\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}"
    r"\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}"
    r"\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}"
    r"\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}"
    r"\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}"
    r"\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}"
    r"\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}"
    r"\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}"
    r"\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}"
    r"\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}"
    r"\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}"
    r"\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}"
    r"\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+")
DEEPSEEK_LLM_PUNCTUATION = r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+"
BLOOM = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+"
AFMOE_DIGITS = r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"
AFMOE_ASIAN = (r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}"
               r"\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{E40}-\x{E7F}\x{E80}-\x{EFF}\x{1780}-\x{17FF}"
               r"\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+")
NEWLINE_RUNS = r"[^\n]+|[\n]+"
KIMI = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

# Each group: its names (llama.cpp src/llama-vocab.cpp, llm_tokenizer_bpe and
# llama_vocab::impl::load), its regexes, and the options that change ids.
GROUPS = [
    ("default", ["default"], [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"], {}),
    ("minicpm5", ["minicpm5"], [r"\p{N}{1,3}", MINICPM5], {"ignore_merges": True}),
    ("llama3", ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                "lfm2", "jina-v5-nano"], [LLAMA3], {"ignore_merges": True, "adds_bos": True}),
    ("deepseek-llm", ["deepseek-llm"],
     [r"[\r\n]", DEEPSEEK_LLM_LETTERS, DEEPSEEK_LLM_PUNCTUATION, r"\s+$", CJK_HANGUL, r"\p{N}+"], {}),
    ("deepseek-coder", ["deepseek-coder"],
     [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK_HANGUL, r"\p{N}"], {}),
    ("deepseek-v3", ["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
     [r"\p{N}{1,3}", HAN_KANA, DEEPSEEK_V3_WORDS], {}),
    ("spark2_5", ["spark2_5"], [r"\p{N}{1,3}", HAN_KANA, SPARK25_WORDS, r"\p{N}"], {}),
    ("youtu", ["youtu"], [YOUTU_CJK, YOUTU_WORDS], {"ignore_merges": True}),
    ("falcon", ["falcon"], [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"], {}),
    ("starcoder", ["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                   "minerva-7b", "mellum2"], [r"\p{N}", GPT2], {}),
    ("gpt-2", ["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
               "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe",
               "mpt", "olmo", "jais", "exaone4", "trillion", "granite-docling"], [GPT2], {}),
    ("jais-2", ["jais-2"], [JAIS2], {}),
    ("gemma4", ["gemma4", "granite-embed-multi-311m"], [NEWLINE_RUNS],
     {"space_marks": True, "newline_runs_whole": True, "adds_bos": True}),
    ("sarvam-moe", ["sarvam-moe"], [NEWLINE_RUNS], {"space_marks": True}),
    ("whitespace", ["whitespace"], [], {"whitespace": True}),
    ("qwen2", ["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
               "solar-open", "grok-2"], [QWEN2], {}),
    ("qwen35", ["qwen35"], [QWEN35], {}),
    ("dbrx", ["dbrx", "smaug-bpe", "glm4", "chatglm-bpe"], [LLAMA3], {}),
    ("bloom", ["poro-chat", "bloom", "gpt3-finnish"], [BLOOM], {}),
    ("viking", ["viking"], [BLOOM, r"\p{N}"], {}),
    ("tekken", ["tekken"], [TEKKEN], {"ignore_merges": True, "adds_bos": True}),
    ("chameleon", ["chameleon"],
     ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", r"\p{N}",
      r"[\p{P}!-/:-@\[-`{-~]", GPT2], {"adds_bos": True}),
    ("exaone-moe", ["exaone-moe"], [EXAONE_MOE], {}),
    ("gpt-4o", ["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], [GPT4O], {}),
    ("granite-embed-multi-97m", ["granite-embed-multi-97m"], [GPT4O], {"ignore_merges": True}),
    ("tiny_aya", ["tiny_aya", "cohere2moe"], [r"\d{1,3}(?=(?:\d{3})*\b)", GPT4O], {}),
    ("superbpe", ["superbpe"], [r"\p{N}+", r"(?=(\d{3})+(?!\d))"], {}),
    ("bailingmoe", ["bailingmoe", "bailingmoe2", "llada-moe"], [BAILING], {}),
    ("seed-coder", ["seed-coder"], [SEED_CODER], {}),
    ("kimi-k2", ["kimi-k2"], [], {"tiktoken": True}),
    ("ufakzeka", ["ufakzeka"], [UFAKZEKA], {}),
    ("afmoe", ["afmoe"], [AFMOE_DIGITS, AFMOE_ASIAN, DEEPSEEK_V3_WORDS], {}),
    ("laguna", ["laguna"], [NEWLINE_RUNS, QWEN2], {}),
]


def split_steps(patterns):
    return [P.Split(Regex(p), "isolated", invert=False) for p in patterns]


def split_at_specials(text, specials):
    """The text between special tokens (leftmost, longest first) and the tokens."""
    pieces, at, raw = [], 0, 0
    while at < len(text):
        found = None
        for special in sorted(specials, key=len, reverse=True):
            if text.startswith(special, at):
                found = special
                break
        if found is None:
            at += 1
            continue
        if at > raw:
            pieces.append((text[raw:at], False))
        pieces.append((found, True))
        at += len(found)
        raw = at
    if raw < len(text):
        pieces.append((text[raw:], False))
    return pieces


def kimi_chunks(text):
    """tokenization_kimi.py's cuts: 400,000 characters, then runs of at most 25,000."""
    for i in range(0, len(text), 400_000):
        s = text[i:i + 400_000]
        run, is_space, start = 0, s[0].isspace() if s else False, 0
        for j in range(len(s)):
            now = s[j].isspace()
            if is_space ^ now:
                run, is_space = 1, now
            else:
                run += 1
                if run > 25_000:
                    yield s[start:j]
                    start, run = j, 1
        yield s[start:]


def tiktoken_encoding(vocab, specials):
    ranks = {bytes(CHAR_TO_BYTE[c] for c in token): rank for token, rank in vocab.items()}
    return tiktoken.Encoding(name="kimi-fixture", pat_str=KIMI, mergeable_ranks=ranks,
                             special_tokens=specials)


def kimi_ids(encoding, specials, text, parse_special=True):
    ids = []
    pieces = split_at_specials(text, specials) if parse_special else [(text, False)]
    for piece, is_special in pieces:
        if is_special:
            ids.append(specials[piece])
            continue
        for chunk in kimi_chunks(piece):
            ids.extend(encoding.encode_ordinary(chunk))
    return ids


def byte_level_vocab(base):
    return {t: i for t, i in base["model"]["vocab"].items()}


def group_ids(group, options, patterns, byte_base, mark_base):
    """Reference ids of every text for one named pre-tokenizer."""
    if options.get("tiktoken"):
        vocab = byte_level_vocab(byte_base)
        specials = {t["content"]: t["id"] for t in byte_base["added_tokens"]}
        encoding = tiktoken_encoding(vocab, specials)
        return [kimi_ids(encoding, specials, text) for text in TEXTS]
    if options.get("space_marks") or options.get("whitespace"):
        document = json.loads(json.dumps(mark_base))
        if options.get("space_marks"):
            document["normalizer"] = to_json(N.Replace(" ", "▁"))
            document["pre_tokenizer"] = to_json(P.Sequence(split_steps(patterns)))
        else:
            document["pre_tokenizer"] = to_json(P.WhitespaceSplit())
        tokenizer = Tokenizer.from_str(json.dumps(document))
        if not options.get("newline_runs_whole"):
            return [tokenizer.encode(text, add_special_tokens=False).ids for text in TEXTS]
        # llama.cpp takes a word of newlines whole when it is a token (Gemma 4).
        vocab = tokenizer.get_vocab()
        result = []
        for text in TEXTS:
            ids = []
            for piece, is_special in split_at_specials(text, SPECIALS):
                if is_special:
                    ids.append(vocab[piece])
                    continue
                normalized = tokenizer.normalizer.normalize_str(piece)
                for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized):
                    if set(word) == {"\n"} and word in vocab:
                        ids.append(vocab[word])
                    else:
                        ids.extend(tokenizer.encode(word, add_special_tokens=False).ids)
            result.append(ids)
        return result
    document = json.loads(json.dumps(byte_base))
    document["pre_tokenizer"] = to_json(P.Sequence(split_steps(patterns) + [BYTE_LEVEL_END]))
    document["model"]["ignore_merges"] = bool(options.get("ignore_merges"))
    tokenizer = Tokenizer.from_str(json.dumps(document))
    return [tokenizer.encode(text, add_special_tokens=False).ids for text in TEXTS]


def write_gguf(path, base, byte_tokens):
    """A vocabulary-only GGUF; tokenizer.ggml.model and .pre are the last two keys, so that
    the test can write other values into a copy."""
    vocab = base["model"]["vocab"]
    added = {t["id"]: t["content"] for t in base["added_tokens"]}
    size = max(list(vocab.values()) + list(added)) + 1
    tokens, types = [""] * size, [gguf.TokenType.NORMAL] * size
    for text, id_ in vocab.items():
        tokens[id_] = text
        if byte_tokens and len(text) == 6 and text.startswith("<0x"):
            types[id_] = gguf.TokenType.BYTE
    for id_, text in added.items():
        tokens[id_], types[id_] = text, gguf.TokenType.CONTROL
    merges = [m if isinstance(m, str) else " ".join(m) for m in base["model"]["merges"]]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(added_id(base, "<s>"))
    writer.add_eos_token_id(added_id(base, "</s>"))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def added_id(base, content):
    return next(t["id"] for t in base["added_tokens"] if t["content"] == content)


def write_kimi_folder(byte_base):
    """A Kimi-K2-style folder: tiktoken.model with the byte-level base's ranks, the special
    tokens laid out as Kimi-K2-Instruct lays them out after its ranks."""
    if KIMI_DIR.exists():
        shutil.rmtree(KIMI_DIR)
    KIMI_DIR.mkdir(parents=True)
    vocab = byte_level_vocab(byte_base)
    n = len(vocab)
    with open(KIMI_DIR / "tiktoken.model", "w") as out:
        for token, rank in sorted(vocab.items(), key=lambda item: item[1]):
            raw = bytes(CHAR_TO_BYTE[c] for c in token)
            out.write(f"{base64.b64encode(raw).decode()} {rank}\n")
    named = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
             6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
             17: "<|im_middle|>", 256: "[UNK]", 257: "[PAD]"}
    config = {
        "tokenizer_class": "TikTokenTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
        "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "added_tokens_decoder": {
            str(n + offset): {"content": content, "lstrip": False, "normalized": False,
                              "rstrip": False, "single_word": False, "special": True}
            for offset, content in named.items()},
    }
    (KIMI_DIR / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    # Only the lines Tandem reads from the model's tokenization_kimi.py.
    stand_in = ["# Stand-in for the model's tokenization_kimi.py: the two settings Tandem checks.",
                "num_reserved_special_tokens = 256", "pat_str = \"|\".join(", "    ["]
    for part in KIMI_PARTS:
        stand_in.append(f'        r"""{part}""",')
    stand_in += ["    ]", ")", ""]
    (KIMI_DIR / "tokenization_kimi.py").write_text("\n".join(stand_in))

    specials = {named.get(offset, f"<|reserved_token_{n + offset}|>"): n + offset
                for offset in range(258)}
    encoding = tiktoken_encoding(vocab, specials)
    texts = TEXTS + [f"<|reserved_token_{n + 5}|> reserved", "[BOS]<|im_user|>user<|im_middle|>Hi<|im_end|>"]
    cases = [{"text": t, "ids": kimi_ids(encoding, specials, t),
              "ids_plain": kimi_ids(encoding, specials, t, parse_special=False)} for t in texts]
    # Runs longer than 25,000 characters are cut; the ids are stored run-length encoded. In
    # the first the cut changes the ids (it falls inside a token), in the second it does not.
    long_runs = []
    for parts, cut_matters in (([["y", 1], ["x", 25000]], True),
                               ([["x", 3], [" ", 25003], ["x", 2]], False)):
        text = "".join(piece * count for piece, count in parts)
        ids = kimi_ids(encoding, specials, text)
        assert (ids != encoding.encode_ordinary(text)) == cut_matters
        encoded = []
        for id_ in ids:
            if encoded and encoded[-1][0] == id_:
                encoded[-1][1] += 1
            else:
                encoded.append([id_, 1])
        long_runs.append({"text_runs": parts, "ids_runs": encoded})
    (KIMI_DIR / "expected.json").write_text(
        json.dumps({"cases": cases, "long_runs": long_runs}, ensure_ascii=False, indent=0) + "\n")
    print(f"kimi-tiktoken: {n} ranks, {len(cases)} cases, {len(long_runs)} long runs")


KIMI_PARTS = [
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
]
assert "|".join(KIMI_PARTS) == KIMI


def main():
    assert tokenizers.__version__.startswith("0.22"), tokenizers.__version__
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    byte_base = train_byte_level_base()
    mark_base = train_space_mark_base()
    bases = {"byte-level": byte_base, "space-mark": mark_base}
    for name, document in bases.items():
        # Compact JSON keeps the fixtures small.
        (OUT / f"{name}-tokenizer.json").write_text(compact(document) + "\n")

    variants = []
    for name, base_name, patch, add_special in tokenizer_json_variants():
        base = bases[base_name]
        if patch.get("post_processor") == "roberta":
            patch["post_processor"] = to_json(tokenizers.processors.RobertaProcessing(
                ("</s>", added_id(base, "</s>")), ("<s>", added_id(base, "<s>"))))
        elif patch.get("post_processor") == "template":
            ids = {t["content"]: t["id"] for t in base["added_tokens"]}
            # Two tokens before the text and two after: more than bos and eos.
            patch["post_processor"] = to_json(tokenizers.processors.TemplateProcessing(
                single="<|im_start|> <s> $A </s> <|im_end|>",
                special_tokens=[(t, ids[t]) for t in ("<s>", "</s>", "<|im_start|>", "<|im_end|>")]))
        tokenizer = Tokenizer.from_str(json.dumps(patched(base, patch)))
        ids = []
        for text in TEXTS:
            try:
                ids.append(tokenizer.encode(text, add_special_tokens=add_special).ids)
            except BaseException as error:
                raise SystemExit(f"{name}: {text!r}: {error}")
        variants.append({"name": name, "base": base_name, "patch": patch,
                         "add_special": add_special, "ids": ids})

    groups, names = [], []
    for group, group_names, patterns, options in GROUPS:
        base_name = "space-mark" if options.get("space_marks") or options.get("whitespace") else "byte-level"
        groups.append({"name": group, "base": base_name,
                       "ids": group_ids(group, options, patterns, byte_base, mark_base)})
        for pre in group_names:
            model = "gpt2"
            if pre == "gemma4":
                model = "gemma4"
            elif pre == "whitespace":
                model = "whitespace"
            names.append({"pre": pre, "model": model, "group": group,
                          "adds_bos": bool(options.get("adds_bos"))})
    write_gguf(OUT / "byte-level-base.gguf", byte_base, False)
    write_gguf(OUT / "space-mark-base.gguf", mark_base, True)

    expected = {"texts": TEXTS, "tokenizer_json": variants, "gguf_groups": groups,
                "gguf_names": names}
    with open(OUT / "expected.json", "w") as out:
        out.write("{\n")
        out.write(f'"texts": {json.dumps(TEXTS, ensure_ascii=False)},\n')
        out.write('"tokenizer_json": [\n' + ",\n".join(compact(v) for v in variants) + "\n],\n")
        out.write('"gguf_groups": [\n' + ",\n".join(compact(g) for g in groups) + "\n],\n")
        out.write('"gguf_names": [\n' + ",\n".join(compact(n) for n in names) + "\n]\n}\n")
    assert json.loads((OUT / "expected.json").read_text()) == json.loads(json.dumps(expected))
    print(f"pre-tokenizers: {len(variants)} tokenizer.json variants, {len(groups)} GGUF groups, "
          f"{len(names)} names, {len(TEXTS)} texts")
    write_kimi_folder(byte_base)


if __name__ == "__main__":
    main()
