#!/usr/bin/env python3
"""Generates the chat-template parity fixtures (tests/fixtures/chat_templates/cases.json).

Renders family-style templates (tests/golden/chat_templates/*.jinja) over many conversations,
plus targeted feature and error cases, with Python's jinja2 (Debian python3-jinja2) in the
environment transformers uses for apply_chat_template: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols, and its tojson / raise_exception / strftime_now
(written here from their documented behaviour). strftime_now reads a fixed clock (NOW) so the
fixtures are reproducible; the C++ test injects the same date.

Usage: python3 tests/golden/generate_chat_templates.py [--out tests/fixtures/chat_templates]
"""
import argparse
import datetime
import json
import os

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2024, 7, 26, 14, 5, 9)
HERE = os.path.dirname(os.path.abspath(__file__))


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "description": "celsius or fahrenheit", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web — returns top results.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "The query"},
            "limit": {"type": "integer", "description": "How many results"}},
            "required": ["query", "limit"]}}},
]


def tc(name, args, id_="call12345", as_string=False):
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if as_string else args}}


SYS = {"role": "system", "content": "You are a helpful assistant."}
CONVERSATIONS = {
    "single": [{"role": "user", "content": "Hello!"}],
    "system_user": [SYS, {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke."}],
    "system_multi": [SYS, {"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "Apple."},
                     {"role": "user", "content": "Another?"}, {"role": "assistant", "content": "Banana."}],
    "thinking": [{"role": "user", "content": "Why is the sky blue?"},
                 {"role": "assistant", "content": "<think>\nRayleigh scattering.\n</think>\n\nBecause of Rayleigh scattering."},
                 {"role": "user", "content": "And sunsets?"}],
    "thinking_last": [{"role": "user", "content": "Add 3 and 4."},
                      {"role": "assistant", "content": "<think>3+4=7</think>The answer is 7."}],
    "reasoning_field": [{"role": "user", "content": "Capital of France?"},
                        {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy geography."}],
    "tool_call": [SYS, {"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [tc("get_weather", {"city": "Paris", "unit": "celsius"})]},
                  {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
                  {"role": "assistant", "content": "It is 21.5°C and clear in Paris."}],
    "tool_call_string_args": [{"role": "user", "content": "Search for cats"},
                              {"role": "assistant", "content": "Let me search.", "tool_calls": [tc("search", {"query": "cats", "limit": 3}, "abcdefghi", True)]},
                              {"role": "tool", "tool_call_id": "abcdefghi", "content": "cats are great"}],
    "two_tool_calls": [{"role": "user", "content": "Weather in Paris and Rome?"},
                       {"role": "assistant", "content": None, "tool_calls": [tc("get_weather", {"city": "Paris"}, "aaaaaaaa1"),
                                                                             tc("get_weather", {"city": "Rome"}, "bbbbbbbb2")]},
                       {"role": "tool", "tool_call_id": "aaaaaaaa1", "content": "20"},
                       {"role": "tool", "tool_call_id": "bbbbbbbb2", "content": "25"}],
    "content_parts": [{"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": " this."}]}],
    "unicode": [{"role": "system", "content": "Réponds en français. 日本語も OK 🙂"},
                {"role": "user", "content": "Quote: \"hi\" \\ back\\slash\nnew line\ttab </s> <|im_end|>"}],
    "whitespace": [{"role": "user", "content": "   padded   \n\n"}, {"role": "assistant", "content": "\n  answer \n"},
                   {"role": "user", "content": "\tok"}],
    "only_system": [SYS],
    "empty": [],
    "user_user": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "long": [SYS] + [m for i in range(12) for m in ({"role": "user", "content": "Question %d?" % i},
                                                        {"role": "assistant", "content": "Answer %d." % i})] +
            [{"role": "user", "content": "Last question."}],
    "tool_role_first": [{"role": "tool", "tool_call_id": "x", "content": "orphan"}],
    "numbers": [{"role": "user", "content": "n"}, {"role": "assistant", "content": "",
                "tool_calls": [tc("search", {"query": "pi", "limit": 3, "f": 3.14, "big": 1e20, "neg": -0.5, "flag": True, "none": None, "nested": {"a": [1, 2.0, "x"]}}, "nnnnnnnnn")]}],
}

TEMPLATES = ["qwen3", "llama3", "mistral", "gemma", "phi", "deepseek_r1", "granite", "command_r"]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}

# Targeted feature cases: (name, template, context).
FEATURES = [
    ("if_elif_else", "{% if x > 2 %}big{% elif x > 1 %}mid{% else %}small{% endif %}", {"x": 2}),
    ("if_else_small", "{% if x > 2 %}big{% elif x > 1 %}mid{% else %}small{% endif %}", {"x": 0}),
    ("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("loop_prev_next", "{% for x in xs %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}]{% endfor %}", {"xs": [1, 2, 3]}),
    ("loop_else", "{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs": []}),
    ("loop_filter", "{% for x in xs if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", {"xs": [1, 2, 3, 4, 5]}),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("loop_dict_keys", "{% for k in d %}{{ k }},{% endfor %}", {"d": {"x": 1, "y": 2}}),
    ("loop_string", "{% for c in 'héllo' %}{{ c }}-{% endfor %}", {}),
    ("loop_cycle", "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}", {"xs": [1, 2, 3]}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("nested_loops", "{% for a in [1,2] %}{% for b in [3,4] %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("set_scope", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("set_if_leaks", "{% if true %}{% set x = 5 %}{% endif %}{{ x }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("set_block", "{% set x %}Hello {{ name }}!{% endset %}[{{ x }}]", {"name": "Bob"}),
    ("set_block_filter", "{% set x | upper %}hello{% endset %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}", {}),
    ("macro_varargs", "{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, k=4) }}", {}),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("call_block", "{% macro wrap(t) %}<{{ t }}>{{ caller() }}</{{ t }}>{% endmacro %}{% call wrap('b') %}bold {{ x }}{% endcall %}", {"x": 1}),
    ("call_block_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1,2]) %}({{ item }}){% endcall %}", {}),
    ("filter_block", "{% filter upper %}hello {{ name }}{% endfilter %}", {"name": "world"}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("raw_block", "{% raw %}{{ not rendered }}{% endraw %}", {}),
    ("comments", "a{# comment #}b\n  {# line comment #}\nc", {}),
    ("ws_control", "a  {{- 'b' -}}  c {%- if true -%}  d  {%- endif -%}  e", {}),
    ("ws_trim_lstrip", "<ul>\n  {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n", {}),
    ("ws_plus", "a\n  {%+ if true %}b{% endif %}\n", {}),
    ("ws_var_no_trim", "{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("ws_trailing_newlines", "x\n\n", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("string_escapes", "{{ 'a\\nb\\tc\\\\d\\'e' }}|{{ \"q\\\"q\" }}|{{ '\\u00e9\\x41' }}", {}),
    ("literals", "{{ 42 }} {{ -7 }} {{ 3.5 }} {{ 1e3 }} {{ 1_000 }} {{ true }} {{ False }} {{ none }} {{ None }} {{ [1, 'a', none] }} {{ {'k': [1, 2.5]} }} {{ (1,) }} {{ () }}", {}),
    ("float_repr", "{{ 0.1 + 0.2 }} {{ 1/3 }} {{ 10/2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 2.5e-7 }} {{ 123456789.125 }}", {}),
    ("arith", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2.0 }} {{ true + 1 }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not true or true }} {{ 'a' ~ 'b' + 'c' }} {{ 1 ~ 2 * 3 }} {{ 'a' ~ 1 * 2 }}", {}),
    ("string_ops", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'x' ~ none ~ 1 ~ true }}", {}),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ none == none }} {{ 'a' == 'a' }}", {}),
    ("in_ops", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'z' not in 'abc' }} {{ 'x' in missing }}", {}),
    ("logic", "{{ true and 'x' }} {{ false or 'y' }} {{ none or [] }} {{ 0 and 1 }} {{ not [] }} {{ '' or 'default' }}", {}),
    ("cond_expr", "{{ 'yes' if x else 'no' }} {{ 'a' if false }}| {{ (1 if x) ~ 'z' }}", {"x": 1}),
    ("attr_item", "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ d.missing }}|{{ l[10] }}|", {"d": {"a": 1, "b": {"c": 2}}, "l": [10, 20, 30]}),
    ("slicing", "{{ l[1:] }} {{ l[:2] }} {{ l[::2] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[3:1:-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ l[10:] }} {{ s[-100:2] }}", {"l": [0, 1, 2, 3, 4], "s": "héllo"}),
    ("tests", "{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }} {{ l is sequence }} {{ s is sequence }} {{ d is iterable }} {{ 1 is number }} {{ 1.5 is number }} {{ 1 is integer }} {{ 1.0 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ false is false }} {{ 0 is false }}", {"x": 1, "n": None, "s": "s", "d": {}, "l": []}),
    ("tests_args", "{{ 2 is equalto 2 }} {{ 2 is eq(3) }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'Abc' is lower }} {{ 2 is in [1, 2] }} {{ x is not none }} {{ 5 is gt 3 }} {{ 5 is lt(3) }} {{ 5 is ge 5 }} {{ 2 is ne 2 }}", {"x": 1}),
    ("filter_tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}|{{ 'é\"\\n' | tojson }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson }}", {"d": {"z": [1, 2.5, None, True], "a": {"x": "日本"}, "e": []}}),
    ("filter_tojson_ascii", "{{ 'é🙂' | tojson(ensure_ascii=true) }} {{ x | tojson(indent='\\t') }}", {"x": {"a": [1]}}),
    ("filter_strings", "{{ '  hi  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world' | upper }}|{{ 'HeLLo' | lower }}|{{ 'hello wORLD-foo(bar' | title }}|{{ 'hELLO World' | capitalize }}|{{ 'aaa' | replace('a', 'b') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 5 | string }}|{{ 'a b  c' | wordcount }}", {}),
    ("filter_length", "{{ 'héllo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }} {{ missing | length }}", {}),
    ("filter_join", "{{ [1, 2, 3] | join }} {{ ['a', 'b'] | join(', ') }} {{ users | join(',', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]}),
    ("filter_default", "{{ missing | default('d') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ none | d('n') }} {{ 0 | d(5, boolean=true) }} {{ x | default }}", {"x": 1}),
    ("filter_first_last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ 'abc' | last }} {{ [] | first }}|", {}),
    ("filter_list", "{{ 'abc' | list }} {{ {'a': 1, 'b': 2} | list }} {{ (1, 2) | list }}", {}),
    ("filter_map", "{{ users | map(attribute='name') | list }} {{ ['a', 'B'] | map('upper') | list }} {{ users | map(attribute='age', default=0) | list }} {{ ['1', '2'] | map('int') | sum }}", {"users": [{"name": "x", "age": 3}, {"name": "y"}]}),
    ("filter_select", "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ [0, 1, '', 'a'] | select | list }} {{ [1, 5, 10] | select('gt', 3) | list }}", {}),
    ("filter_selectattr", "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }} {{ ms | rejectattr('role', 'eq', 'user') | list | length }} {{ ms | selectattr('flag') | list | length }} {{ ms | selectattr('role', 'in', ['tool', 'system']) | list | length }}", {"ms": [{"role": "user", "c": 1, "flag": True}, {"role": "assistant", "c": 2}, {"role": "user", "c": 3}, {"role": "tool", "c": 4}]}),
    ("filter_items_dictsort", "{{ d | items | list }} {{ d | dictsort }} {{ d | dictsort(reverse=true) }} {{ d | dictsort(by='value') }} {{ {'b': 1, 'A': 2, 'a': 0} | dictsort }} {{ {'b': 1, 'A': 2} | dictsort(true) }}", {"d": {"b": 2, "a": 3, "c": 1}}),
    ("filter_indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'x\\ny' | indent('> ') }}|{{ 'one' | indent(first=true) }}", {}),
    ("filter_numbers", "{{ '42' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '0x1A' | int(base=16) }} {{ '2.5' | float }} {{ 'x' | float }} {{ 3 | float }} {{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 5 | round }} {{ -1 | abs }} {{ -1|abs + 1 }}", {}),
    ("filter_unique", "{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ ['a', 'A'] | unique(true) | list }} {{ [{'n': 1}, {'n': 1}, {'n': 2}] | unique(attribute='n') | list }}", {}),
    ("filter_misc", "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {{ [1, 2, 3] | sum }} {{ [1, 5, 3] | max }} {{ [4, 2, 8] | min }} {{ '<a & b>' | e }} {{ 'x' | safe }} {{ users | sort(attribute='n') | map(attribute='n') | join }}", {"users": [{"n": 2}, {"n": 1}]}),
    ("str_methods", "{{ s.startswith('He') }} {{ s.endswith('!') }} {{ s.startswith(('x', 'H')) }} {{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|{{ 'a\\n\\n'.rstrip('\\n') }}|{{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ s.find('l') }} {{ s.find('z') }} {{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ s.count('l') }}", {"s": "Hello!"}),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a b c'.rsplit(none, 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ '-'.join(['a', 'b']) }}", {}),
    ("dict_methods", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d['items'] is defined }}", {"d": {"a": 1, "b": [2]}}),
    ("list_methods", "{{ l.index(2) }} {{ l.count(1) }}", {"l": [1, 2, 1]}),
    ("globals", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %d %b') }}", {}),
    ("repr_values", "{{ [1.0, 'it\\'s', \"q\", {'k': none}, true] }} {{ {'a': (1, 'b')} }} {{ ['a\\nb'] }}", {}),
    ("undefined_ok", "[{{ missing }}][{{ missing ~ 'x' }}][{{ missing is defined }}][{% for x in missing %}{{ x }}{% endfor %}][{{ missing == missing }}][{% if missing %}t{% else %}f{% endif %}][{{ none.attr }}][{{ 5.attr }}]", {}),
    ("messages_loop", "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}),
    ("content_parts_loop", "{% for part in content %}{% if part.type == 'text' %}{{ part.text }}{% elif part['type'] == 'image' %}<img>{% endif %}{% endfor %}", {"content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}),
    ("tool_call_arguments", "{% for t in tool_calls %}{{ t.function.name }}({{ t.function.arguments | tojson }}){% if not loop.last %}, {% endif %}{% endfor %}", {"tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": "x"}}}, {"function": {"name": "g", "arguments": {}}}]}),
    ("ws_mixed_tags", "{% for x in xs %}\n    {{ x }}\n{% endfor %}\n  done", {"xs": [1, 2]}),
    ("ws_comment_dash", "a\n  {#- c -#}\n  b", {}),
    ("ws_lstrip_after_text", "text {% if true %}x{% endif %}\n  {% if true %}y{% endif %}", {}),
    ("dict_literal_nested", "{{ {'a': {'b': {'c': 1}}}['a']['b'] }}", {}),
    ("filter_chain_paren", "{{ ('a' ~ 'b') | upper }} {{ (xs | length) + 1 }} {{ xs | map('string') | join('-') | upper }}", {"xs": [1, 2]}),
    ("unicode_ops", "{{ s | length }} {{ s[0] }} {{ s[-1] }} {{ s | upper }} {{ s[1:3] }}", {"s": "ñandú🙂"}),
    ("integer_division_neg", "{{ -1 // 3 }} {{ 1 // -3 }} {{ -1 % -3 }} {{ 5 % -3 }} {{ -5.5 // 2 }}", {}),
    ("loop_last_tool", "{% for m in ms %}{{ m }}{% if not loop.last %},{% endif %}{% endfor %}", {"ms": ["a", "b", "c"]}),
    ("set_in_macro_isolated", "{% set x = 1 %}{% macro f() %}{% set x = 2 %}{{ x }}{% endmacro %}{{ f() }}{{ x }}", {}),
    ("macro_sees_globals", "{% macro f() %}{{ g }}{{ bos_token }}{% endmacro %}{% set g = 7 %}{{ f() }}", {"bos_token": "<s>"}),
    ("is_not_defined", "{% if x is not defined %}nd{% endif %}{% if not y is defined %}nd2{% endif %}", {}),
    ("last_undefined", "[{{ missing | last }}]", {}),
    ("bool_str", "{{ true }} {{ [true, false] }} {{ true | string }} {{ true | tojson }} {{ none | tojson }}", {}),
]

# (name, template, context): each must fail in jinja2 and in sluice.
ERRORS = [
    ("raise_exception", "{{ raise_exception('Custom failure: ' ~ n) }}", {"n": 3}),
    ("raise_in_loop", "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('Unknown role ' + m.role) }}{% endif %}{% endfor %}", {"messages": [{"role": "user"}, {"role": "narrator"}]}),
    ("undefined_attr_chain", "{{ x.y.z }}", {}),
    ("undefined_add", "{{ missing + 1 }}", {}),
    ("undefined_call", "{{ missing() }}", {}),
    ("undefined_compare", "{{ missing < 1 }}", {}),
    ("type_add", "{{ 1 + 'a' }}", {}),
    ("type_compare", "{{ 1 < 'a' }}", {}),
    ("div_zero", "{{ 1 / 0 }}", {}),
    ("mod_zero", "{{ 1 % 0 }}", {}),
    ("list_append_unsafe", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("dict_update_unsafe", "{% set d = {} %}{{ d.update({'a': 1}) }}", {}),
    ("none_iter", "{% for x in none %}{% endfor %}", {}),
    ("int_iter", "{% for x in 5 %}{% endfor %}", {}),
    ("not_callable", "{{ 'abc'() }}", {}),
    ("unknown_filter", "{{ 1 | nosuchfilter }}", {}),
    ("unknown_test", "{{ 1 is nosuchtest }}", {}),
    ("syntax_unclosed_if", "{% if true %}x", {}),
    ("syntax_unclosed_var", "{{ x ", {}),
    ("syntax_bad_token", "{{ 1 + }}", {}),
    ("syntax_unknown_tag", "{% frobnicate %}", {}),
    ("syntax_endfor_mismatch", "{% for x in y %}{% endif %}", {}),
    ("syntax_unclosed_string", "{{ 'abc }}", {}),
    ("syntax_unclosed_comment", "{# abc", {}),
    ("set_attr_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("range_too_big", "{{ range(1000000) | list | length }}", {}),
    ("unpack_mismatch", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("items_non_mapping", "{{ [1] | items | list }}", {}),
    ("neg_undefined", "{{ -missing }}", {}),
    ("str_join_int", "{{ ','.join([1, 2]) }}", {}),
    ("subscript_undefined", "{{ missing[0] }}", {}),
    ("in_string_int", "{{ 1 in 'abc' }}", {}),
    ("deep_recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}),
]


def render(env, source, context):
    try:
        return {"output": env.from_string(source).render(**context)}
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": "syntax: " + str(e)}
    except RecursionError:
        return {"error": "recursion"}
    except Exception as e:  # noqa: BLE001 -- any jinja2 failure is an expected error
        return {"error": type(e).__name__ + ": " + str(e)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "fixtures", "chat_templates"))
    args = ap.parse_args()
    env = make_env()
    templates = {}
    for name in TEMPLATES:
        with open(os.path.join(HERE, "chat_templates", name + ".jinja"), encoding="utf-8") as f:
            templates[name] = f.read()
    cases = []
    for tname in TEMPLATES:
        for cname, conv in CONVERSATIONS.items():
            variants = [{"add_generation_prompt": True}, {"add_generation_prompt": False}]
            if "tool" in cname or cname in ("single", "system_user", "long", "numbers"):
                variants.append({"add_generation_prompt": True, "tools": TOOLS})
            if tname == "qwen3" and cname in ("single", "thinking", "tool_call", "thinking_last"):
                variants.append({"add_generation_prompt": True, "enable_thinking": False})
                variants.append({"add_generation_prompt": True, "enable_thinking": True})
            if tname == "llama3" and cname in ("single", "tool_call"):
                variants.append({"add_generation_prompt": True, "date_string": "01 Jan 2025"})
                variants.append({"add_generation_prompt": True, "tools": TOOLS, "tools_in_user_message": False})
            if tname == "granite" and cname in ("single", "multi_turn"):
                variants.append({"add_generation_prompt": True, "documents": [{"text": "Doc A."}, {"text": "Doc B."}], "controls": {"citations": True}})
            for k, extra in enumerate(variants):
                ctx = dict(SPECIAL)
                ctx["messages"] = conv
                ctx["tools"] = None
                ctx["documents"] = None
                ctx.update(extra)
                ctx = json.loads(json.dumps(ctx))  # exactly what the C++ side reads
                case = {"name": "%s/%s/%d" % (tname, cname, k), "template": tname, "context": ctx}
                case.update(render(env, templates[tname], ctx))
                cases.append(case)
    for kind, items in (("feature", FEATURES), ("error", ERRORS)):
        for name, source, ctx in items:
            ctx = json.loads(json.dumps(ctx))
            tname = kind + "/" + name
            templates[tname] = source
            case = {"name": tname, "template": tname, "context": ctx}
            case.update(render(env, source, ctx))
            if kind == "error" and "error" not in case:
                raise SystemExit("error case %s rendered without error: %r" % (name, case["output"]))
            if kind == "feature" and "error" in case:
                raise SystemExit("feature case %s failed: %s" % (name, case["error"]))
            cases.append(case)
    os.makedirs(args.out, exist_ok=True)
    doc = {"jinja2_version": jinja2.__version__, "now": NOW.strftime("%Y-%m-%dT%H:%M:%S"),
           "templates": templates, "cases": cases}
    path = os.path.join(args.out, "cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    n_err = sum("error" in c for c in cases)
    print("wrote %s: %d cases (%d expected errors), jinja2 %s" % (path, len(cases), n_err, jinja2.__version__))


if __name__ == "__main__":
    main()
