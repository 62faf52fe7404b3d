#!/usr/bin/env python3
"""Generates conformance.json: expected renderings of Jinja chat templates.

The environment mirrors the one transformers builds for chat templates
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
a tojson filter that calls json.dumps with ensure_ascii=False, and the
raise_exception / strftime_now globals). Run with Jinja2 3.1.x:

    python3 gen_conformance.py > conformance.json
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTracker(jinja2.ext.Extension):
    """{% generation %} as transformers defines it: a call block rendering its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTracker, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


ENV = make_env()
CASES = []


def render_case(name, template, vars_):
    case = {"name": name, "template": template, "vars": vars_}
    try:
        case["want"] = ENV.from_string(template).render(**vars_)
    except jinja2.exceptions.TemplateSyntaxError:
        raise
    except Exception as e:  # runtime errors: we only check that one happens
        case["error"] = str(e)
    CASES.append(case)


def apply_case(name, template, messages, add_generation_prompt=False, tools=None, extra=None, special=None):
    variables = dict(special or {})
    variables.update(messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt)
    variables.update(extra or {})
    case = {"name": name, "template": template, "messages": messages,
            "add_generation_prompt": add_generation_prompt, "extra": extra or {}, "special": special or {}}
    if tools is not None:
        case["tools"] = tools
    try:
        case["want"] = ENV.from_string(template).render(**variables)
    except Exception as e:
        case["error"] = str(e)
    CASES.append(case)


# ---- engine features -------------------------------------------------------
micro = {
    "whitespace_lstrip_trim": ("  {% if true %}\n  x\n  {% endif %}\n  y {# c #}\n z\n", {}),
    "whitespace_minus": ("a  {%- if true -%}  b  {%- endif -%}  c\n{{- ' d ' -}}\n e", {}),
    "whitespace_plus": ("  {%+ if true +%}\nx{% endif %}\n", {}),
    "whitespace_var_no_lstrip": ("  {{ 'v' }}\n  {% set a = 1 %}\nw", {}),
    "comment_trim": ("a\n  {#- c -#}\n  b{# x #}\nc{#-#}  d {#+ e +#}\n f", {}),
    "raw_block": ("{% raw %}{{ not evaluated }}{% endraw %}|{%- raw -%}  x  {%- endraw -%}|", {}),
    "crlf_and_trailing_newline": ("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    "literals": ("{{ [1, 'a', none, true, 1.5, {'k': 'v'}, (1,), (1, 2)] }}|{{ 'it''s' }}|{{ \"q'\" }}|{{ 'a\\nb\\x41\\u00e9\\d' }}", {}),
    "arith": ("{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 2**-1 }} {{ 1e20 }} {{ 0.1+0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 123456789.0 }} {{ -0.0 }} {{ 3*'ab' }} {{ [1]*2 }} {{ 1_000 }} {{ true + 1 }}", {}),
    "precedence": ("{{ 1 + 2 * 3 }} {{ -2 ** 2 }} {{ 'a' ~ 1 * 2 }} {{ not 1 == 2 }} {{ 2 - 1 - 1 }} {{ -1|abs }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    "and_or_values": ("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or none }}|{{ u or 'd' }}", {}),
    "ternary": ("{{ 'y' if x else 'n' }}{{ 'y' if not x else 'n' }}|{{ 'a' if false }}|{{ ('a' if false) is defined }}", {"x": 1}),
    "undefined_semantics": ("[{{ u }}][{{ u ~ 'a' }}][{{ u|length }}][{{ u is defined }}][{{ u == u }}][{{ u == none }}][{% for x in u %}x{% endfor %}][{{ 'a' in u }}][{{ u|default('d') }}][{{ none|default('d') }}][{{ ''|default('d', true) }}][{{ u|list }}][{{ u|trim }}]", {}),
    "undefined_attr_error": ("{{ u.x }}", {}),
    "undefined_add_error": ("{{ u + 'a' }}", {}),
    "none_attr": ("[{{ none.x }}][{{ 'abc'.foo }}][{{ [1].x }}][{{ n.content }}][{{ m.missing }}][{{ m['missing'] is defined }}]", {"n": None, "m": {"a": 1}}),
    "str_render": ("{{ true }} {{ none }} {{ 1.0 }} {{ 2.5e-7 }} {{ [\"it's\", 'a\"b', 'a\\'\"b', '\\n\\t\\x01é'] }} {{ {'a': [1, {'b': none}]} }} {{ (1, 'x') }}", {}),
    "for_loop_vars": ("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a', 'b') }}|{% endfor %}", {"xs": [10, 20, 30]}),
    "for_filter_else": ("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{{ loop.last }},{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"xs": [1, 2, 3]}),
    "for_unpack_items": ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    "for_break_continue": ("{% for x in range(10) %}{% if x is odd %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    "scoping": ("{% set x = 0 %}{% for i in [1, 2, 3] %}{{ x }}{% set x = i %}{{ x }}|{% endfor %}{{ x }}{% if true %}{% set y = 5 %}{% endif %}{{ y }}{% for i in [1, 2] %}{% if i == 2 %}{{ z }}{% endif %}{% set z = i %}{% endfor %}", {}),
    "namespace": ("{% set ns = namespace(a=1, b='x') %}{% for i in [1, 2, 3] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}{% set ns2 = namespace({'k': 2}) %}{{ ns2.k }}", {}),
    "nested_loops": ("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}", {}),
    "set_block": ("{% set s %}  a {{ 1 + 1 }}  {% endset %}[{{ s }}]{% set t | upper | trim %} hi {% endset %}[{{ t }}]", {}),
    "macros": ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }} {{ greet() }}", {}),
    "macro_recursion": ("{% macro render(v) %}{% if v is mapping %}{{ '{' }}{% for k, x in v.items() %}{{ k }}:{{ render(x) }};{% endfor %}{{ '}' }}{% elif v is sequence and v is not string %}[{% for x in v %}{{ render(x) }}{% endfor %}]{% else %}{{ v }}{% endif %}{% endmacro %}{{ render(d) }}", {"d": {"a": [1, {"b": "c"}], "z": None}}),
    "with_block": ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    "slicing": ("{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[-2:] }}{{ xs[5:] }}{{ 'hello'[1:3] }}{{ 'héllo'[::-1] }}{{ xs[-1] }}{{ xs[10] }}{{ 'ab'[0] }}", {"xs": [1, 2, 3, 4]}),
    "in_operator": ("{{ 'a' in 'cat' }}{{ 'x' not in 'cat' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 'v' in d }}{{ 1 in (1, 2) }}", {"d": {"k": "v"}}),
    "comparisons": ("{{ 1 == 1.0 }}{{ 1 == true }}{{ [1] == [1.0] }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ none == none }}{{ 'a' != 'a' }}{{ 2 >= 2 }}", {}),
    "string_methods": ("{{ s.startswith('He') }}{{ s.endswith(('x', 'd')) }}|{{ s.strip() }}|{{ s.lstrip('\\n ') }}|{{ s.rstrip() }}|{{ '  a  b '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}|{{ s.replace('l', 'L') }}{{ s.replace('l', 'L', 1) }}|{{ s.upper() }}{{ s.lower() }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}|{{ '-'.join(['a', 'b']) }}{{ s.find('l') }}{{ s.count('l') }}{{ 'a\\nb\\r\\nc'.splitlines() }}{{ '{} and {}'.format('x', 1) }}{{ '{0}{name}'.format('p', name='q') }}", {"s": "\n  Hello World  \n"}),
    "string_is_methods": ("{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ '  '.isspace() }}{{ 'AB'.isupper() }}{{ 'ab'.islower() }}{{ ''.isdigit() }}", {}),
    "percent_format": ("{{ '%s-%d' % ('a', 3) }} {{ '%05.2f' % 3.14159 }} {{ '%(x)s!' % {'x': 1} }} {{ '%s'|format('z') }} {{ '%r' % 'q' }} {{ '100%%' % () }}", {}),
    "filters_basic": ("{{ '  x '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello'|upper }}{{ 'Hello'|lower }}{{ 'hello big-world (x)'|title }}{{ 'hELLO wORLD'|capitalize }}|{{ [1, 2, 3]|length }}{{ 'héllo'|count }}{{ {'a': 1}|length }}|{{ [1, 2]|first }}{{ [1, 2]|last }}{{ 'abc'|first }}|{{ 'abc'|list }}{{ 'abc'|reverse }}{{ [1, 2]|reverse|list }}|{{ 42|string ~ '!' }}{{ '42'|int + 1 }}{{ '4.7'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ 3.9|int }}{{ '1.5'|float }}{{ 'x'|float }}|{{ -3|abs }}{{ 2.567|round(2) }}{{ 2.5|round }}{{ 3.5|round }}{{ 2.1|round(method='ceil') }}{{ 7|round }}", {}),
    "filters_join_map_select": ("{{ xs|join(', ') }}|{{ [1, 2]|join }}|{{ users|map(attribute='name')|join('/') }}|{{ users|selectattr('admin')|map(attribute='name')|list }}|{{ users|rejectattr('admin')|list|length }}|{{ users|selectattr('name', 'equalto', 'b')|list }}|{{ [1, 2, 3, 4]|select('odd')|list }}{{ [1, 2, 3, 4]|reject('even')|list }}|{{ ['a', 'b']|map('upper')|list }}|{{ users|map(attribute='age', default=0)|list }}|{{ users|join(',', attribute='name') }}|{{ [0, 1, '', 'x']|select|list }}", {"xs": ["a", "b"], "users": [{"name": "a", "admin": True, "age": 3}, {"name": "b", "admin": False}]}),
    "filters_items_dictsort": ("{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}|{{ d|dictsort }}|{{ d|dictsort(by='value', reverse=true) }}|{{ d|list }}", {"d": {"b": 2, "a": 3, "C": 1}}),
    "filters_sort_unique_minmax": ("{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}{{ [3, 1, 2]|sort(reverse=true) }}{{ users|sort(attribute='n')|map(attribute='n')|list }}{{ [1, 2, 1, 'a', 'A']|unique|list }}{{ [3, 1, 2]|max }}{{ [3, 1, 2]|min }}{{ [1, 2, 3]|sum }}{{ users|sum(attribute='n') }}", {"users": [{"n": 2}, {"n": 1}]}),
    "filters_misc": ("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('>', blank=true) }}|{{ '<a & \"b\">'|e }}|{{ 'x'|safe }}|{{ 'x'|center(5) }}|{{ 'one two  three'|wordcount }}|{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 0)|list }}|{{ {'a': 1}|attr('a') }}{{ none|default('x') }}{{ u|d('y') }}", {}),
    "tojson": ("{{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ x|tojson(sort_keys=true) }}|{{ x|tojson(separators=(',', ':')) }}|{{ 'é\\u2028\\x7f\\x01\"\\\\'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ [1.0, 1e100, -0.5, 3]|tojson }}|{{ [[], {}]|tojson(indent=4) }}|{{ none|tojson }}{{ true|tojson }}|{{ '😀'|tojson(ensure_ascii=true) }}|{{ x|tojson(indent='\\t') }}", {"x": {"z": [1, 2.5, "é", None, True, {"y": []}], "a": "b"}}),
    "tests": ("{{ 'a' is string }}{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ [] is sequence }}{{ 'x' is sequence }}{{ none is none }}{{ 0 is none }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ true is boolean }}{{ 1 is boolean }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 2 is in [1, 2] }}{{ 2 is equalto 2 }}{{ 2 is eq 3 }}{{ 2 is ne 3 }}{{ 1 is lt 2 }}{{ 1 is gt 2 }}{{ 1 is ge 1 }}{{ 1 is le 0 }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ range is callable }}{{ 1 is callable }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ none is sameas none }}{{ x is not defined }}{{ x is undefined }}", {}),
    "dict_access": ("{{ d.a }}{{ d['a'] }}{{ d.get('a') }}{{ d.get('zz', 'def') }}{{ d.get('zz') }}{{ d['items'] }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.nested.x }}{{ d['nested']['x'] }}{{ xs.0 }}{{ xs[0] }}", {"d": {"a": 1, "items": "I", "nested": {"x": "X"}}, "xs": ["first"]}),
    "list_methods": ("{{ [1, 2, 1].count(1) }}{{ ['a', 'b'].index('b') }}", {}),
    "list_append_unsafe": ("{% set xs = [] %}{{ xs.append(1) }}", {}),
    "dict_literal_order": ("{{ {'z': 1, 'a': 2} }}{{ {'z': 1, 'a': 2}|tojson }}{{ dict(b=1, a=2) }}", {}),
    "concat_tilde": ("{{ 'a' ~ 1 ~ none ~ true ~ [1] ~ u }}", {}),
    "raise_exception": ("{% if x %}{{ raise_exception('bad input: ' ~ x) }}{% endif %}", {"x": "boom"}),
    "range_variants": ("{{ range(3)|list }}{{ range(1, 4)|list }}{{ range(10, 0, -3)|list }}{{ range(0)|list }}", {}),
    "range_too_big": ("{{ range(1000000)|length }}", {}),
    "string_concat_type_error": ("{{ 'a' + 1 }}", {}),
    "iterate_none_error": ("{% for x in none %}{% endfor %}", {}),
    "generation_block": ("{% for m in messages %}{% generation %}{% set inner = m %}{{ m }}{% endgeneration %}[{{ inner }}]{% endfor %}", {"messages": ["a", "b"]}),
    "loop_changed": ("{% for x in [1, 1, 2, 2, 3] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", {}),
    "multiline_expr": ("{{\n  'a'\n  ~ 'b'\n}}{%\n  if true\n%}c{% endif %}", {}),
    "nested_data_from_json": ("{{ cfg.opts.n + 1 }} {{ cfg.opts.f * 2 }} {{ cfg.list|length }} {{ cfg.list[1].k }} {{ cfg.float_int }}", {"cfg": {"opts": {"n": 1, "f": 1.5}, "list": [1, {"k": "v"}], "float_int": 2.0}}),
}
for name, (tmpl, vars_) in micro.items():
    render_case(name, tmpl, vars_)

# ---- real chat templates ----------------------------------------------------
QWEN3 = json.load(open(sys.argv[1]))["chat_template"] if len(sys.argv) > 1 else None

GEMMA = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
         "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
         "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
         "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
         "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
         "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")

MISTRAL = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

DEEPSEEK_R1 = "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}"

LLAMA31 = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# A ChatML template that understands OpenAI content parts.
PARTS = """{% for message in messages %}<|im_start|>{{ message['role'] }}
{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% elif part['type'] == 'image_url' %}<image>{% endif %}{% endfor %}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

weather_tool = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather (°C) in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                                                                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                               "required": ["city"]}}}
time_tool = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}

chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Weather in Paris?"}]
tool_turns = [
    {"role": "user", "content": "Weather in Paris and the time?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
        {"id": "c2", "type": "function", "function": {"name": "now", "arguments": "{\"tz\": \"CET\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"},
    {"role": "tool", "tool_call_id": "c2", "content": "12:00"},
    {"role": "assistant", "content": "It is 21°C at 12:00."},
    {"role": "user", "content": "Thanks"},
]
thinking = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
    {"role": "user", "content": "3+3?"},
    {"role": "assistant", "reasoning_content": "add again", "content": "6"},
]

if QWEN3:
    for agp in (False, True):
        apply_case(f"qwen3_chat_agp{agp}", QWEN3, chat, agp)
        apply_case(f"qwen3_tools_agp{agp}", QWEN3, chat, agp, tools=[weather_tool, time_tool])
        apply_case(f"qwen3_tool_turns_agp{agp}", QWEN3, tool_turns, agp, tools=[weather_tool, time_tool])
        apply_case(f"qwen3_thinking_agp{agp}", QWEN3, thinking, agp)
        apply_case(f"qwen3_thinking_last_agp{agp}", QWEN3, thinking[:2], agp)
    apply_case("qwen3_no_thinking", QWEN3, chat, True, extra={"enable_thinking": False})
    apply_case("qwen3_thinking_true", QWEN3, chat, True, extra={"enable_thinking": True})
    apply_case("qwen3_tool_response_only_user", QWEN3, [{"role": "user", "content": "<tool_response>x</tool_response>"}, {"role": "assistant", "content": "<think>r</think>a"}], True)
    apply_case("qwen3_unicode", QWEN3, [{"role": "user", "content": "日本語 😀 \u2028 \\ \" ' {{ not jinja }}"}], True)

special_gemma = {"bos_token": "<bos>", "eos_token": "<eos>"}
apply_case("gemma_chat", GEMMA, chat[1:], True, special=special_gemma)
apply_case("gemma_trim", GEMMA, [{"role": "user", "content": "  spaced \n"}], False, special=special_gemma)
apply_case("gemma_system_error", GEMMA, chat, True, special=special_gemma)
apply_case("gemma_alternation_error", GEMMA, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], True, special=special_gemma)

special_mistral = {"bos_token": "<s>", "eos_token": "</s>"}
apply_case("mistral_chat", MISTRAL, chat, True, special=special_mistral)
apply_case("mistral_nosystem", MISTRAL, chat[1:], False, special=special_mistral)
apply_case("mistral_bad_role", MISTRAL, [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}], False, special=special_mistral)

special_ds = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
ds_tools = [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                {"type": "function", "function": {"name": "now", "arguments": "{}"}}]},
            {"role": "tool", "content": "21"}, {"role": "tool", "content": "12:00"},
            {"role": "assistant", "content": "Warm."}, {"role": "user", "content": "ok"}]
apply_case("deepseek_r1_chat", DEEPSEEK_R1, chat, True, special=special_ds)
apply_case("deepseek_r1_think_strip", DEEPSEEK_R1, thinking[:2] + [{"role": "user", "content": "again"}], True, special=special_ds)
apply_case("deepseek_r1_tools", DEEPSEEK_R1, ds_tools, True, special=special_ds)

special_llama = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
apply_case("llama31_chat", LLAMA31, chat, True, special=special_llama)
apply_case("llama31_tools", LLAMA31, chat, True, tools=[weather_tool], special=special_llama)
apply_case("llama31_tools_system", LLAMA31, chat, True, tools=[weather_tool], extra={"tools_in_user_message": False, "date_string": "01 Jan 2025"}, special=special_llama)
apply_case("llama31_tool_call", LLAMA31, [{"role": "user", "content": "Weather?"},
                                        {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
                                        {"role": "tool", "content": {"temp": 21, "ok": True}},
                                        {"role": "tool", "content": "plain"}], True, tools=[weather_tool], special=special_llama)
apply_case("llama31_builtin", LLAMA31, [{"role": "user", "content": "search"}, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "brave_search", "arguments": {"query": "go"}}}]}], False,
           extra={"builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"]}, special=special_llama)
apply_case("llama31_two_calls_error", LLAMA31, tool_turns, True, special=special_llama)

apply_case("parts_template", PARTS, [{"role": "user", "content": [{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": "http://x"}}, {"type": "text", "text": "ok?"}]},
                                      {"role": "assistant", "content": "Yes."}], True)

json.dump(CASES, sys.stdout, ensure_ascii=False, indent=1)
sys.stdout.write("\n")
