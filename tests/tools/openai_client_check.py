#!/usr/bin/env python3
"""Drives `tandem serve` with the official openai Python package, as editors, agents and
scripts do: a streamed and a whole chat reply on the demo model, a plain completion, the
model list, stop strings, a wrong key, and a tool call (streamed and not) from the
tool-caller fixture, whose weights answer every chat with one call.

    python3 tests/tools/openai_client_check.py build/app/tandem

Needs: openai (pip). CTest runs it as `openai_client` when the configured Python has openai
(cmake -DTANDEM_PYTHON=/path/to/python); exits non-zero on the first thing that is wrong.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import openai

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL_CALLER = os.path.join(ROOT, "tests", "data", "models", "tool-caller")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                   "required": ["location"]}}}]


class Served:
    def __init__(self, tandem, *args, env=None):
        home = tempfile.mkdtemp()
        e = dict(os.environ, HOME=home, XDG_DATA_HOME=home + "/data",
                 XDG_CONFIG_HOME=home + "/config", XDG_CACHE_HOME=home + "/.cache",
                 TANDEM_LOG_TO_FILE="0")
        e.pop("TANDEM_API_KEY", None)
        e.update(env or {})
        self.p = subprocess.Popen([tandem, "serve", "--port", "0", "--threads", "1", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e, text=True)
        for line in self.p.stdout:
            m = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
            if m:
                self.url = m.group(1)
                return
        raise SystemExit("tandem serve did not start")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.p.terminate()
        self.p.wait(timeout=20)


def check(condition, what):
    if not condition:
        raise SystemExit("FAIL: " + what)
    print("ok:", what)


def main(tandem):
    with Served(tandem) as s:
        client = openai.OpenAI(base_url=s.url, api_key="unused")
        models = client.models.list()
        check([m.id for m in models.data] == ["demo-model"], "models.list names the demo model")
        pieces = []
        finish = None
        stream = client.chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=20, temperature=0, stream=True, stream_options={"include_usage": True})
        usage = None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                if choice.finish_reason:
                    finish = choice.finish_reason
        text = "".join(pieces)
        check(len(pieces) > 3 and text, "a chat reply streams in pieces")
        check(finish == "length" and usage and usage.completion_tokens == 20,
              "the stream ends with its finish reason and usage")
        whole = client.chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=20, temperature=0)
        check(whole.choices[0].message.content == text, "the same reply, whole, is the same text")
        check(whole.usage.prompt_tokens_details.cached_tokens > 0,
              "the repeated prompt comes from the KV cache")
        cut = text[len(text) // 2:][:4]
        stopped = client.chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=20, temperature=0, stop=[cut])
        check(stopped.choices[0].message.content == text[:text.find(cut)]
              and stopped.choices[0].finish_reason == "stop", "a stop string ends the reply")
        plain = client.completions.create(model="demo-model", prompt="And the LORD said",
                                          max_tokens=6, temperature=0)
        check(plain.choices[0].text and 1 <= plain.usage.completion_tokens <= 6
              and plain.choices[0].finish_reason in ("stop", "length"), "a plain completion")
        try:
            client.chat.completions.create(model="demo-model", messages=[], max_tokens=2)
            check(False, "an empty conversation is refused")
        except openai.BadRequestError as e:
            check("messages" in str(e), "an empty conversation is refused with a sentence")

    with Served(tandem, env={"TANDEM_API_KEY": "k3y"}) as s:
        try:
            openai.OpenAI(base_url=s.url, api_key="wrong").chat.completions.create(
                model="demo-model", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
            check(False, "a wrong key is refused")
        except openai.AuthenticationError:
            check(True, "a wrong key is refused (401)")
        ok = openai.OpenAI(base_url=s.url, api_key="k3y").chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        check(ok.usage.completion_tokens == 2, "the right key is let in")

    with Served(tandem, "-m", TOOL_CALLER) as s:
        client = openai.OpenAI(base_url=s.url, api_key="unused")
        r = client.chat.completions.create(
            model="tool-caller", messages=[{"role": "user", "content": "Weather in Tokyo?"}],
            tools=TOOLS, temperature=0)
        calls = r.choices[0].message.tool_calls
        check(r.choices[0].finish_reason == "tool_calls" and len(calls) == 1, "a tool call comes back")
        check(calls[0].function.name == "get_weather"
              and json.loads(calls[0].function.arguments) == {"location": "Tokyo"},
              "with its name and arguments")
        # The conversation goes on with the tool's answer, as an agent sends it.
        r2 = client.chat.completions.create(
            model="tool-caller", temperature=0, tools=TOOLS,
            messages=[{"role": "user", "content": "Weather in Tokyo?"},
                      r.choices[0].message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny, 21 C"}])
        check(r2.usage.prompt_tokens > r.usage.prompt_tokens, "the tool's answer goes back in")
        streamed = {}
        finish = None
        for chunk in client.chat.completions.create(
                model="tool-caller", messages=[{"role": "user", "content": "Weather in Tokyo?"}],
                tools=TOOLS, temperature=0, stream=True):
            for choice in chunk.choices:
                for c in choice.delta.tool_calls or []:
                    entry = streamed.setdefault(c.index, {"name": "", "arguments": ""})
                    entry["name"] += c.function.name or ""
                    entry["arguments"] += c.function.arguments or ""
                if choice.finish_reason:
                    finish = choice.finish_reason
        check(finish == "tool_calls" and len(streamed) == 1
              and streamed[0]["name"] == "get_weather"
              and json.loads(streamed[0]["arguments"]) == {"location": "Tokyo"},
              "a streamed tool call, put together as the client does")
    print("openai", openai.__version__, ": all checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
