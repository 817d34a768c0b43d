#!/usr/bin/env python3
"""Writes the chat-template conformance expectations for tst_chat_template_conformance.

For every template under tests/data/chat-templates/templates and every conversation in
CONVERSATIONS (each with and without the generation prompt), renders the template with
Python's jinja2 configured the way Hugging Face transformers renders chat templates, and
records either the exact output or the fact that the template raised.

Output: tests/data/chat-templates/conversations.json and expected/<template>.json.
Run from anywhere: python3 tests/tools/gen_chat_template_cases.py
"""
import json
import pathlib
import sys
from datetime import datetime

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

DATA_DIR = pathlib.Path(__file__).resolve().parent.parent / "data" / "chat-templates"

# strftime_now must be deterministic; the C++ test injects the same instant.
FIXED_NOW = datetime(2026, 1, 15, 9, 30, 0)

# Special tokens as each model's tokenizer_config.json defines them. A template not listed
# gets neither variable, so it sees them undefined.
SPECIAL_TOKENS = {
    "GLM-4.6": {"bos_token": "", "eos_token": "<|endoftext|>"},
    "HuggingFaceTB-SmolLM3-3B": {"bos_token": "", "eos_token": "<|im_end|>"},
    "LFM2-8B-A1B": {"bos_token": "<|startoftext|>", "eos_token": "<|im_end|>"},
    "MiniMax-M2": {"bos_token": "]~!b[", "eos_token": "[e~["},
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": {"bos_token": "<s>", "eos_token": "<|im_end|>"},
    "Qwen-Qwen3-0.6B": {"bos_token": "", "eos_token": "<|im_end|>"},
    "Qwen3-Coder": {"bos_token": "", "eos_token": "<|im_end|>"},
    "deepseek-ai-DeepSeek-V3.1": {"bos_token": "<｜begin▁of▁sentence｜>",
                                  "eos_token": "<｜end▁of▁sentence｜>"},
    "google-gemma-2-2b-it": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "ibm-granite-granite-4.0": {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"},
    "meta-llama-Llama-3.1-8B-Instruct": {"bos_token": "<|begin_of_text|>",
                                         "eos_token": "<|eot_id|>"},
    "mistralai-Mistral-Nemo-Instruct-2407": {"bos_token": "<s>", "eos_token": "</s>"},
    "moonshotai-Kimi-K2": {"bos_token": "[BOS]", "eos_token": "[EOS]"},
    "openai-gpt-oss-120b": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"},
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days", "default": 1},
            },
            "required": ["city"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}

# Each conversation renders twice: with and without the generation prompt. "variables"
# are passed next to the model's special tokens.
CONVERSATIONS = {
    "system_user": {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hello! What's 2+2?"},
        ],
    },
    "user_only": {
        "messages": [{"role": "user", "content": "Say \"hi\" in three languages.\nThanks."}],
    },
    "multi_turn": {
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Name a prime number."},
            {"role": "assistant", "content": "7"},
            {"role": "user", "content": "And one larger than 100? Use ünïcödé ✓."},
            {"role": "assistant", "content": "  101  "},
            {"role": "user", "content": "Thanks."},
        ],
    },
    "reasoning": {
        "messages": [
            {"role": "user", "content": "Is 91 prime?"},
            {"role": "assistant", "reasoning_content": "91 = 7 * 13, so it is not prime.",
             "content": "No, 91 = 7 × 13."},
            {"role": "user", "content": "And 97?"},
        ],
    },
    "reasoning_last": {
        "messages": [
            {"role": "system", "content": "Think step by step."},
            {"role": "user", "content": "Is 91 prime?"},
            {"role": "assistant", "reasoning_content": "91 = 7 * 13.",
             "content": "No."},
        ],
    },
    "tools": {
        "tools": [WEATHER_TOOL, SEARCH_TOOL],
        "messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "What's the weather in Zürich?"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": "call00001", "type": "function",
                             "function": {"name": "get_weather",
                                          "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
            {"role": "tool", "tool_call_id": "call00001", "name": "get_weather",
             "content": "{\"temperature\": 21.5, \"condition\": \"sunny\"}"},
            {"role": "assistant", "content": "It is 21.5 °C and sunny in Zürich."},
            {"role": "user", "content": "And in Bern?"},
        ],
    },
    "tools_no_system": {
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "Weather in Oslo and Rome?"},
            {"role": "assistant",
             "tool_calls": [
                 {"id": "abc123def", "type": "function",
                  "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                 {"id": "xyz789uvw", "type": "function",
                  "function": {"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}}]},
            {"role": "tool", "tool_call_id": "abc123def", "content": "cloudy, 4 degrees"},
            {"role": "tool", "tool_call_id": "xyz789uvw", "content": "sunny, 18 degrees"},
        ],
    },
    "thinking_off": {
        "variables": {"enable_thinking": False},
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "Capital of France?"},
        ],
    },
    "tool_arguments_as_string": {
        "tools": [SEARCH_TOOL],
        "variables": {"reasoning_effort": "high", "model_identity": "You are Tandem."},
        "messages": [
            {"role": "user", "content": "Search for 'MoE offloading'."},
            {"role": "assistant", "content": "Searching.",
             "tool_calls": [{"id": "srch00001", "type": "function",
                             "function": {"name": "web_search",
                                          "arguments": "{\"query\": \"MoE offloading\"}"}}]},
            {"role": "tool", "tool_call_id": "srch00001", "name": "web_search",
             "content": "[{\"title\": \"KTransformers\", \"score\": 0.93}]"},
        ],
    },
    "content_parts": {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Sys part."}]},
            {"role": "user", "content": [{"type": "text", "text": "Part one."},
                                         {"type": "text", "text": "Part two."}]},
        ],
    },
}


def raise_exception(message):
    raise RuntimeError(message)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    env = make_environment()
    (DATA_DIR / "expected").mkdir(parents=True, exist_ok=True)
    with open(DATA_DIR / "conversations.json", "w", encoding="utf-8") as f:
        json.dump(CONVERSATIONS, f, ensure_ascii=False, indent=2)
        f.write("\n")
    for path in sorted((DATA_DIR / "templates").glob("*.jinja")):
        model = path.stem
        template = env.from_string(path.read_text(encoding="utf-8"))
        variables = SPECIAL_TOKENS.get(model, {})
        cases = {}
        for name, conversation in CONVERSATIONS.items():
            for add_generation_prompt in (False, True):
                context = dict(variables)
                context.update(conversation.get("variables", {}))
                context["messages"] = conversation["messages"]
                context["add_generation_prompt"] = add_generation_prompt
                if "tools" in conversation:
                    context["tools"] = conversation["tools"]
                case = f"{name}/{'gen' if add_generation_prompt else 'nogen'}"
                try:
                    cases[case] = {"output": template.render(**context)}
                except Exception as error:  # the template refused this conversation
                    cases[case] = {"raises": f"{type(error).__name__}: {error}"}
        with open(DATA_DIR / "expected" / f"{model}.json", "w", encoding="utf-8") as f:
            json.dump({"template": path.name, "variables": variables, "cases": cases}, f,
                      ensure_ascii=False, indent=1)
            f.write("\n")
        raised = sum(1 for c in cases.values() if "raises" in c)
        print(f"{model}: {len(cases)} cases, {raised} raise", file=sys.stderr)


if __name__ == "__main__":
    main()
