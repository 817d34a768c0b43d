#!/usr/bin/env python3
"""Trains Tandem's built-in demo model: a small Qwen3-MoE that writes English.

Corpus (public-domain or freely redistributable English text from Debian 12 packages):
  bible-kjv + bible-kjv-text  the King James Bible, dumped with `bible Gen1:1-Rev22:21`
  fortunes, fortunes-min      /usr/share/games/fortunes/* (every file but ascii-art)
  dict-devil                  /usr/share/dictd/devil.dict.dz (Ambrose Bierce, 1911)
Install them with
  apt-get install -y --no-install-recommends bible-kjv bible-kjv-text fortunes fortunes-min dict-devil

Every `heldout_every`-th unit of each source (a Bible passage, a fortune, a dictionary entry)
is held out; the model never trains on it. Half the training units (chat_fraction) are
rendered through the model's own ChatML template as a user turn and an assistant reply, so
the template the chat window uses is the format the model learned.

Run (CPU, two threads, about an hour):
  nice -n 19 python3 tools/demo-model/train.py --out resources/demo-model
Stop early with Ctrl-C or SIGTERM: the weights trained so far are exported as if the time
budget had ended.  `--export-from CHECKPOINT` exports a checkpoint without training.

Writes into --out: config.json, generation_config.json, tokenizer.json,
tokenizer_config.json, model.safetensors (bf16), heldout-sample.txt (a slice of the held-out
text), training_report.json (perplexities Tandem's tests compare against) and
expert_activations.json (per layer and expert, how many held-out tokens were routed there).
"""
import argparse
import gzip
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time

import torch
import tokenizers
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The pre-tokenizer regex of Qwen2/Qwen3 tokenizers, so the demo exercises the same path.
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# ChatML, written for Tandem. Rendered with trim_blocks and lstrip_blocks (as transformers
# and Tandem do), so the newlines after block tags vanish and the lines stay readable.
CHAT_TEMPLATE = """{% for message in messages %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""

FORTUNE_PROMPTS = ["Tell me a fortune.", "Hello!", "Say something wise.", "Give me a quote.",
                   "What do you think?", "Tell me something.", "Any advice for today?", "Hi.",
                   "Cheer me up.", "What is on your mind?"]
DEVIL_PROMPTS = ["What is {w}?", "Define {w}.", "What does {w} mean?", "Explain {w}."]
KJV_CONTINUE_PROMPTS = ["Continue: {v}", "What comes after \"{v}\"?", "Go on from here: {v}"]
KJV_READ_PROMPTS = ["Read me {ref}.", "Tell me about {ref}.", "What does {ref} say?"]

stop_requested = False


def request_stop(signum, frame):
    global stop_requested
    stop_requested = True
    print(f"signal {signum}: stopping after this step and exporting", flush=True)


# ---------------------------------------------------------------- corpus

def read_kjv():
    """Passages of the King James Bible as (reference, [verses])."""
    text = subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                          text=True).stdout
    chapters = []  # (reference, [verse texts])
    previous_blank = True
    for line in text.splitlines():
        header = re.fullmatch(r"(\S.*) (\d+)", line)
        verse = re.match(r"^  (\d+) (.*)$", line)
        if previous_blank and header:
            chapters.append((line, []))
        elif verse:
            chapters[-1][1].append(verse.group(2).strip())
        elif line.strip():
            chapters[-1][1][-1] += " " + line.strip()
        previous_blank = not line.strip()
    return chapters


def read_fortunes():
    folder = "/usr/share/games/fortunes"
    fortunes = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith((".dat", ".u8")) or name == "ascii-art" or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for chunk in f.read().split("\n%\n"):
                chunk = chunk.strip("\n").rstrip()
                if 0 < len(chunk) <= 1500 and chunk != "%":
                    fortunes.append(chunk)
    return fortunes


def read_devil():
    """Entries of The Devil's Dictionary as (headword, entry text)."""
    with gzip.open("/usr/share/dictd/devil.dict.dz", "rt", encoding="utf-8") as f:
        text = f.read()
    start = text.index("ABASEMENT, n.")
    entries = []
    for block in re.split(r"\n(?=[A-Z][A-Z'\-]+(?: [A-Z'\-]+)*, [a-z])", "\n" + text[start:]):
        block = block.strip()
        m = re.match(r"([A-Z][A-Z'\-]+(?: [A-Z'\-]+)*), ", block)
        if m:
            entries.append((m.group(1), block))
    return entries


def build_units(cfg):
    """All corpus units as dicts {source, plain, chat(list of messages)}, in a stable order."""
    per_passage = cfg["kjv_verses_per_passage"]
    units = {"kjv": [], "fortunes": [], "devil": []}
    rng = random.Random(1)
    for ref, verses in read_kjv():
        for i in range(0, len(verses), per_passage):
            part = verses[i:i + per_passage]
            plain = " ".join(part)
            if len(part) > 1 and rng.random() < 0.6:
                prompt = rng.choice(KJV_CONTINUE_PROMPTS).format(v=part[0])
                answer = " ".join(part[1:])
            else:
                prompt = rng.choice(KJV_READ_PROMPTS).format(ref=f"{ref}, verse {i + 1}")
                answer = plain
            units["kjv"].append({"plain": plain, "chat": [
                {"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]})
    for fortune in read_fortunes():
        units["fortunes"].append({"plain": fortune, "chat": [
            {"role": "user", "content": rng.choice(FORTUNE_PROMPTS)},
            {"role": "assistant", "content": fortune}]})
    for word, entry in read_devil():
        units["devil"].append({"plain": entry, "chat": [
            {"role": "user", "content": rng.choice(DEVIL_PROMPTS).format(w=word.lower())},
            {"role": "assistant", "content": entry}]})
    return units


def split_units(units, every):
    train, heldout = [], {}
    for source, items in units.items():
        heldout[source] = []
        for i, unit in enumerate(items):
            (heldout[source] if i % every == every // 2 else train).append(unit)
    return train, heldout


def heldout_texts(heldout, sample_chars):
    """The whole held-out text, and a sample of it drawn round-robin from every source."""
    sources = sorted(heldout)
    full = "\n\n".join(u["plain"] for s in sources for u in heldout[s])
    sample, i = [], 0
    while sum(len(s) + 2 for s in sample) < sample_chars:
        source = sources[i % len(sources)]
        k = i // len(sources)
        if k < len(heldout[source]):
            sample.append(heldout[source][k]["plain"])
        i += 1
    return full, "\n\n".join(sample) + "\n"


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(train_units, cfg):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=tokenizers.Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=cfg["vocab_size"] - len(SPECIAL_TOKENS),
                                  min_frequency=cfg["min_frequency"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())

    def texts():
        for u in train_units:
            yield u["plain"]
            yield u["chat"][0]["content"]
    tok.train_from_iterator(texts(), trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    return tok


def fast_tokenizer(tok):
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE)


def token_stream(units, tok, hf_tok, chat_fraction, rng):
    """One epoch: the units shuffled, each plain or as a chat, joined by <|endoftext|>."""
    eot = tok.token_to_id("<|endoftext|>")
    order = list(units)
    rng.shuffle(order)
    texts = [hf_tok.apply_chat_template(u["chat"], tokenize=False) if rng.random() < chat_fraction
             else u["plain"] for u in order]
    stream = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        stream.extend(enc.ids)
        stream.append(eot)
    return stream


# ---------------------------------------------------------------- model

def make_config(cfg, tok):
    eot = tok.token_to_id("<|endoftext|>")
    im_end = tok.token_to_id("<|im_end|>")
    return transformers.Qwen3MoeConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"],
        max_position_embeddings=cfg["max_position_embeddings"], rope_theta=cfg["rope_theta"],
        rms_norm_eps=cfg["rms_norm_eps"], num_experts=cfg["num_experts"],
        num_experts_per_tok=cfg["num_experts_per_tok"],
        moe_intermediate_size=cfg["moe_intermediate_size"], norm_topk_prob=cfg["norm_topk_prob"],
        decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=cfg["tie_word_embeddings"],
        router_aux_loss_coef=cfg["router_aux_loss_coef"], output_router_logits=True,
        bos_token_id=eot, eos_token_id=[im_end, eot], pad_token_id=eot)


def perplexity(model, ids, context):
    """exp(mean NLL) over consecutive windows of `context` tokens; the first token of each
    window is only context. Tandem's `perplexity` command computes exactly this."""
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids), context):
            window = ids[start:start + context]
            if len(window) < 2:
                continue
            logits = model(torch.tensor([window])).logits[0].float()
            nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(window[1:]),
                                                    reduction="sum")
            total += nll.item()
            count += len(window) - 1
    return math.exp(total / count), count


def expert_counts(model, ids, context, layers, experts, top_k):
    counts = torch.zeros(layers, experts, dtype=torch.long)
    with torch.no_grad():
        for start in range(0, len(ids), context):
            window = ids[start:start + context]
            out = model(torch.tensor([window]), output_router_logits=True)
            for layer, logits in enumerate(out.router_logits):
                chosen = torch.topk(logits.float(), top_k, dim=-1).indices.flatten()
                counts[layer] += torch.bincount(chosen, minlength=experts)
    return counts


# ---------------------------------------------------------------- training

def learning_rate(cfg, step, time_fraction):
    """Warm-up, a plateau, then a linear decay over the last part of the time budget."""
    peak = cfg["peak_lr"]
    floor = peak * cfg["min_lr_fraction"]
    if step < cfg["warmup_steps"]:
        return peak * (step + 1) / cfg["warmup_steps"]
    decay_start = 1.0 - cfg["decay_fraction"]
    if time_fraction <= decay_start:
        return peak
    progress = min(1.0, (time_fraction - decay_start) / cfg["decay_fraction"])
    return peak + (floor - peak) * progress


def train(model, stream_for_epoch, cfg, eval_ids, work):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["peak_lr"], betas=(0.9, 0.95), eps=1e-8)
    seq, batch = cfg["sequence_tokens"], cfg["batch_sequences"]
    budget_s = cfg["time_budget_min"] * 60
    start = time.time()
    last_checkpoint = start
    step, epoch, tokens_seen = 0, 0, 0
    coef = model.config.router_aux_loss_coef
    log = []
    while not stop_requested:
        stream = torch.tensor(stream_for_epoch(epoch))
        offset = random.Random(epoch).randrange(seq)
        n = (len(stream) - offset) // seq
        windows = stream[offset:offset + n * seq].view(n, seq)
        windows = windows[torch.randperm(n, generator=torch.Generator().manual_seed(epoch))]
        for b in range(0, n - batch + 1, batch):
            fraction = (time.time() - start) / budget_s
            if fraction >= 1.0 or stop_requested:
                break
            lr = learning_rate(cfg, step, fraction)
            for group in opt.param_groups:
                group["lr"] = lr
            x = windows[b:b + batch]
            model.train()
            out = model(input_ids=x, labels=x)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            tokens_seen += x.numel()
            if step % 10 == 0:
                elapsed = time.time() - start
                lm = out.loss.item() - coef * out.aux_loss.item()
                print(f"step {step} epoch {epoch} loss {lm:.3f} aux {out.aux_loss.item():.3f} "
                      f"lr {lr:.2e} tokens {tokens_seen} {tokens_seen / elapsed:.0f} tok/s "
                      f"{elapsed / 60:.1f} min", flush=True)
            if time.time() - last_checkpoint > cfg["checkpoint_every_min"] * 60:
                model.eval()
                ppl, _ = perplexity(model, eval_ids, seq)
                print(f"checkpoint at step {step}: held-out sample perplexity {ppl:.2f}", flush=True)
                log.append({"step": step, "minutes": round((time.time() - start) / 60, 1),
                            "heldout_sample_perplexity": round(ppl, 3)})
                torch.save({"model": model.state_dict(), "step": step, "tokens_seen": tokens_seen,
                            "minutes": (time.time() - start) / 60, "log": log},
                           os.path.join(work, "checkpoint.pt"))
                last_checkpoint = time.time()
        else:
            epoch += 1
            continue
        break
    return {"steps": step, "epochs_started": epoch + 1, "tokens_seen": tokens_seen,
            "minutes": round((time.time() - start) / 60, 1), "log": log}


# ---------------------------------------------------------------- export

def export(model, tok, out, gen_ids):
    os.makedirs(out, exist_ok=True)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_diff_dict()
    config.update({"output_router_logits": False, "torch_dtype": "bfloat16",
                   "architectures": ["Qwen3MoeForCausalLM"]})
    config.pop("dtype", None)
    config.pop("transformers_version", None)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": gen_ids["eot"], "eos_token_id": [gen_ids["im_end"], gen_ids["eot"]],
                   "pad_token_id": gen_ids["eot"], "do_sample": True, "temperature": 0.7,
                   "top_k": 40, "top_p": 0.9}, f, indent=2)
        f.write("\n")
    tok.save(os.path.join(out, "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                       "rstrip": False, "single_word": False, "special": True}
             for t in SPECIAL_TOKENS}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False,
                   "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "unk_token": None, "model_max_length": model.config.max_position_embeddings,
                   "clean_up_tokenization_spaces": False, "added_tokens_decoder": added,
                   "chat_template": CHAT_TEMPLATE}, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=os.path.join(HERE, "train_config.json"))
    ap.add_argument("--out", required=True, help="the model folder to write")
    ap.add_argument("--work", default="/tmp/tandem-demo-train", help="checkpoints and tokenizer")
    ap.add_argument("--minutes", type=float, help="override the time budget")
    ap.add_argument("--export-from", help="export this checkpoint instead of training")
    args = ap.parse_args()
    with open(args.config) as f:
        cfg = json.load(f)
    if args.minutes is not None:
        cfg["training"]["time_budget_min"] = args.minutes
    torch.set_num_threads(cfg["training"]["torch_threads"])
    torch.manual_seed(cfg["seed"])
    random.seed(cfg["seed"])
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    os.makedirs(args.work, exist_ok=True)

    t0 = time.time()
    units = build_units(cfg["corpus"])
    train_units, heldout = split_units(units, cfg["corpus"]["heldout_every"])
    full_heldout, sample = heldout_texts(heldout, cfg["corpus"]["heldout_sample_chars"])
    tok_path = os.path.join(args.work, "tokenizer.json")
    if args.export_from and os.path.exists(tok_path):
        tok = Tokenizer.from_file(tok_path)
    else:
        tok = train_tokenizer(train_units, cfg["tokenizer"])
        tok.save(tok_path)
    hf_tok = fast_tokenizer(tok)
    sizes = {s: len(v) for s, v in units.items()}
    train_chars = sum(len(u["plain"]) for u in train_units)
    print(f"corpus units {sizes}, training units {len(train_units)} ({train_chars} chars), "
          f"held-out {len(full_heldout)} chars; prepared in {time.time() - t0:.0f} s", flush=True)

    config = make_config(cfg["model"], tok)
    model = transformers.Qwen3MoeForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    print(f"model parameters {params}", flush=True)
    sample_ids = tok.encode(sample, add_special_tokens=False).ids
    heldout_ids = tok.encode(full_heldout, add_special_tokens=False).ids
    if args.export_from:
        checkpoint = torch.load(args.export_from)
        model.load_state_dict(checkpoint["model"])
        run = {k: checkpoint[k] for k in ("steps", "tokens_seen", "minutes", "log") if k in checkpoint}
        run["steps"] = checkpoint["step"]
    else:
        chat_rng = random.Random(cfg["seed"])
        run = train(model, lambda epoch: token_stream(train_units, tok, hf_tok,
                                                      cfg["corpus"]["chat_fraction"], chat_rng),
                    cfg["training"], sample_ids, args.work)
    model.eval()
    gen_ids = {"eot": tok.token_to_id("<|endoftext|>"), "im_end": tok.token_to_id("<|im_end|>")}
    export(model, tok, args.out, gen_ids)
    with open(os.path.join(args.out, "heldout-sample.txt"), "w") as f:
        f.write(sample)

    # Measure the exported bf16 weights in float32, as Tandem runs them.
    exported = transformers.Qwen3MoeForCausalLM.from_pretrained(args.out, dtype=torch.float32)
    exported.eval()
    context = cfg["evaluation"]["context_tokens"]
    sample_ppl, sample_tokens = perplexity(exported, sample_ids, context)
    full_ppl, full_tokens = perplexity(exported, heldout_ids, context)
    m = cfg["model"]
    counts = expert_counts(exported, heldout_ids, context, m["num_hidden_layers"],
                           m["num_experts"], m["num_experts_per_tok"])
    with open(os.path.join(args.out, "expert_activations.json"), "w") as f:
        json.dump({"layers": m["num_hidden_layers"], "experts": m["num_experts"],
                   "experts_per_token": m["num_experts_per_tok"], "tokens": len(heldout_ids),
                   "text": "the held-out split of the training corpus (see README.md)",
                   "counts": counts.tolist()}, f)
        f.write("\n")
    prompt = hf_tok.apply_chat_template([{"role": "user", "content": "Tell me a fortune."}],
                                        tokenize=False, add_generation_prompt=True)
    torch.manual_seed(cfg["seed"])
    generated = exported.generate(torch.tensor([tok.encode(prompt).ids]), max_new_tokens=60,
                                  do_sample=True, temperature=0.7, top_k=40, top_p=0.9,
                                  eos_token_id=[gen_ids["im_end"], gen_ids["eot"]])
    reply = tok.decode(generated[0].tolist()[len(tok.encode(prompt).ids):])
    report = {
        "corpus_units": sizes, "training_units": len(train_units), "training_chars": train_chars,
        "heldout_every": cfg["corpus"]["heldout_every"], "parameters": params,
        "context_tokens": context,
        "heldout_sample": "heldout-sample.txt", "heldout_sample_tokens": sample_tokens,
        "heldout_sample_perplexity": sample_ppl,
        "heldout_tokens": full_tokens, "heldout_perplexity": full_ppl,
        "training": run, "sample_reply": {"prompt": "Tell me a fortune.", "reply": reply},
        "oracle": f"transformers {transformers.__version__}, torch {torch.__version__}, float32",
    }
    with open(os.path.join(args.out, "training_report.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps({k: report[k] for k in ("heldout_sample_perplexity", "heldout_perplexity",
                                             "sample_reply")}, indent=2), flush=True)


if __name__ == "__main__":
    main()
