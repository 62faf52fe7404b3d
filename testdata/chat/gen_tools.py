#!/usr/bin/env python3
"""Generates qwen3-tools-expected.json (Qwen3's own chat template) and
llama3-json-tools-expected.json (llama3-json-tools.jinja, a template in the Llama 3.1 custom-tool
style written for these tests): conversations rendered with tools, tool calls and tool results, in the Jinja environment transformers' apply_chat_template builds
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson as json.dumps
with ensure_ascii=False). Each case keeps the request as an OpenAI client sends it (tool call
arguments as JSON strings); before rendering, arguments strings are decoded into objects (key
order kept), as vLLM and SGLang do before applying a template, and the null content of an
assistant message that carries tool calls is passed as "" (Qwen3's template tests
`'</think>' in message.content`, which fails on None). Run with Jinja2 3.1.x:

    python3 gen_tools.py ../tokenizer-files/qwen3/tokenizer_config.json > qwen3-tools-expected.json
    python3 gen_tools.py llama3-json-tools.jinja > llama3-json-tools-expected.json
"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city, in °C.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                          "required": ["city", "days"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}

CALL1 = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"days\": 2, \"city\": \"Zürich\"}"}}
CALL2 = {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}

CASES = [
    {"name": "tools", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER, TIME]},
    {"name": "tools with system", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}], "tools": [WEATHER]},
    {"name": "multi-turn", "tools": [WEATHER, TIME], "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Zürich, and the time?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL1, CALL2]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
        {"role": "assistant", "content": "21 °C at noon."},
        {"role": "user", "content": "Thanks. Tomorrow?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [CALL1]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 19}"},
    ]},
    {"name": "multi-turn no thinking", "tools": [WEATHER], "enable_thinking": False, "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL1]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]},
]


LLAMA_CASES = [
    {"name": "tools", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER, TIME]},
    {"name": "multi-turn", "tools": [WEATHER], "messages": [
        {"role": "system", "content": "Be brief. "},
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL1]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "21 °C."},
        {"role": "user", "content": "Thanks."},
    ]},
]


def main():
    path = sys.argv[1]
    special = {}
    if path.endswith(".json"):
        source = json.load(open(path))["chat_template"]
        cases = CASES
    else:
        source = open(path).read()
        cases = LLAMA_CASES
        special = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    tmpl = make_env().from_string(source)
    out = []
    for case in cases:
        msgs = json.loads(json.dumps(case["messages"]))  # no shared objects
        for m in msgs:
            if m.get("tool_calls") and m.get("content") is None:
                m["content"] = ""
            for c in m.get("tool_calls") or []:
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        kw = {}
        if "enable_thinking" in case:
            kw["enable_thinking"] = case["enable_thinking"]
        prompt = tmpl.render(messages=msgs, tools=case["tools"], add_generation_prompt=True, **special, **kw)
        out.append(dict(case, prompt=prompt))
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    print()


main()
