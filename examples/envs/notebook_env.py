#!/usr/bin/env python3
"""A notebook/lookup environment served over longhaul's HTTP environment
protocol (docs/protocols.md, version 2), with the Python standard library
only.

The task: sum the codes printed on some pages of a library. The agent has
three tools: read(page) returns the page, long enough that a few of them
outgrow the context; note(text) writes to the episode's notebook (a side
effect) and returns the notebook; answer(value) ends the episode. A page
read once is gone from the context after compaction, so the agent must
note each code as it goes. Every step is also metered (an effect of its
own, as a paid API call would be).

The reward gives partial credit, so a small model learns the steps before
it can solve the task: 0.1 for the first read of each of the task's pages,
0.1 for noting the code of the task page read last (once per page), and
0.4 for the right sum; an episode succeeds when the sum is right.

Exactly once: every step carries an idempotency key. The server appends
each answered key to a journal (one JSON line, flushed and fsynced before
the reply goes out) with the session's state after the step and the
step's effect. A repeated key gets the stored reply, and its session the
stored state, without a second effect. Sessions live in the journal too,
so the server killed with SIGKILL and restarted loses nothing: the journal
is read back at start (a torn last line, cut by the kill, is dropped).

    python3 notebook_env.py --port 8092 --journal /tmp/nb/journal.jsonl

GET /stats returns {"effects": n, "repeated": [keys with >1 effect], ...}.
"""

import argparse
import hashlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FILLER = "old ledgers of trade routes and ship logs kept by clerks in winter"

TOOLS = [
    {"type": "function", "function": {
        "name": "read", "description": "read a page of the library",
        "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]}}},
    {"type": "function", "function": {
        "name": "note", "description": "append text to your notebook; returns the notebook",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}},
    {"type": "function", "function": {
        "name": "answer", "description": "give the final answer and end the episode",
        "parameters": {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]}}},
]
TOOL_NAMES = {t["function"]["name"] for t in TOOLS}


def code_of(page):
    """The code printed on a page: fixed by the page number."""
    return int(hashlib.sha256(b"page%d" % page).hexdigest(), 16) % 10


def page_text(page):
    return "page %d: %s. code %d" % (page, FILLER, code_of(page))


class BadRequest(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Env:
    """Sessions, stored answers and the journal, behind one lock."""

    def __init__(self, journal):
        self.lock = threading.Lock()
        self.sessions = {}   # id -> state
        self.answers = {}    # key -> {"reply": ..., "state": ...}
        self.effects = {}    # key -> count
        self.next = 0
        self.journal_path = journal
        self._load()
        self.journal = open(journal, "a", encoding="utf-8")

    def _load(self):
        if not os.path.exists(self.journal_path):
            return
        with open(self.journal_path, "rb") as f:
            data = f.read()
        good = 0
        for line in data.split(b"\n"):
            if not line.strip():
                good += len(line) + 1
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                break  # a torn last line: the kill cut it
            if good + len(line) + 1 > len(data):
                break  # no newline: torn
            self._apply(rec)
            good += len(line) + 1
        if good < len(data):
            with open(self.journal_path, "r+b") as f:
                f.truncate(good)

    def _apply(self, rec):
        t = rec["t"]
        if t == "open":
            self.sessions[rec["id"]] = rec["state"]
            self.next = max(self.next, rec["n"])
        elif t == "step":
            self.answers[rec["key"]] = {"reply": rec["reply"], "state": rec["state"]}
            if rec["id"] in self.sessions:
                self.sessions[rec["id"]] = rec["state"]
            if rec.get("effect"):
                self.effects[rec["key"]] = self.effects.get(rec["key"], 0) + 1
        elif t == "close":
            self.sessions.pop(rec["id"], None)

    def _write(self, rec):
        self.journal.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.journal.flush()
        os.fsync(self.journal.fileno())
        self._apply(rec)

    def reset(self, req):
        task = req.get("task") or {}
        params = task.get("params") or {}
        pages = params.get("pages")
        if not isinstance(pages, list) or not pages or not all(isinstance(p, int) and p >= 0 for p in pages):
            raise BadRequest(400, "task.params.pages must be a non-empty list of page numbers")
        state = {"pages": pages, "notebook": [], "done": False, "turns": 0, "read": [], "noted": [], "last": None}
        with self.lock:
            self.next += 1
            sid = "s%d-%s" % (self.next, os.urandom(3).hex())
            self._write({"t": "open", "id": sid, "n": self.next, "state": state})
        text = "sum codes of pages " + " ".join(str(p) for p in pages)
        msgs = [{"role": "user", "content": text}]
        rep = {"id": sid, "observation": text, "snapshot": False}
        if req.get("version", 0) >= 2:
            rep.update(version=2, messages=msgs, tools=TOOLS)
        return rep

    def step(self, req):
        sid = req.get("id")
        key = req.get("key") or ""
        with self.lock:
            if sid not in self.sessions:
                raise BadRequest(404, "no session %r" % sid)
            if key and key in self.answers:
                # A repeated key: the stored answer, the state after it.
                self.sessions[sid] = self.answers[key]["state"]
                return self.answers[key]["reply"]
            state = json.loads(json.dumps(self.sessions[sid]))
            if state["done"]:
                raise BadRequest(422, "step after the episode ended")
            reply, effect = self._act(state, req)
            self._write({"t": "step", "id": sid, "key": key, "reply": reply, "state": state, "effect": effect})
            if req.get("message") is None:
                reply = {k: v for k, v in reply.items() if k != "messages"}
            return reply

    def _act(self, state, req):
        msg = req.get("message")
        if msg is not None:
            calls = msg.get("tool_calls") or []
        else:  # version 1: "name arg" text
            name, _, arg = (req.get("action") or "").strip().partition(" ")
            calls = [{"id": "call", "function": {"name": name, "arguments": json.dumps({"_": arg})}}]
        state["turns"] += 1
        out, reward, effect = [], 0.0, {"metered": True}
        errors = (msg or {}).get("tool_call_errors") or []
        if errors:  # the parser could not read a call: tell the agent why
            out.append({"role": "user", "content": "malformed tool call: " + "; ".join(errors)})
        elif not calls:
            out.append({"role": "user", "content": "call a tool"})
        for c in calls:
            fn = c.get("function") or {}
            name = fn.get("name", "")
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = None
            if not isinstance(args, dict):
                text = "error: arguments are not a JSON object"
            elif name not in TOOL_NAMES:
                text = "error: no tool %s" % name
                name = ""
            else:
                arg = next(iter(args.values()), None)
                text, r, effect = self._tool(state, name, arg, effect)
                reward += r
            m = {"role": "tool", "tool_call_id": c.get("id", ""), "content": text}
            if name:
                m["name"] = name
            out.append(m)
            if state["done"]:
                break
        obs = "\n".join(m["content"] for m in out)
        success = state["done"] and state.get("solved", False)
        return {"observation": "" if state["done"] else obs, "reward": reward, "done": state["done"],
                "success": success, "messages": [] if state["done"] else out}, effect

    def _tool(self, state, name, arg, effect):
        for k, v in (("read", []), ("noted", []), ("last", None)):
            state.setdefault(k, v)  # a journal written before partial credit
        if name == "read":
            try:
                page = int(arg)
            except (TypeError, ValueError):
                return "error: read needs a page number", 0.0, effect
            r = 0.0
            if page in state["pages"]:
                state["last"] = page
                if page not in state["read"]:
                    state["read"].append(page)
                    r = 0.1
            return page_text(page), r, effect
        if name == "note":
            text = str(arg)[:40]
            state["notebook"].append(text)
            r, last = 0.0, state["last"]
            if last is not None and last not in state["noted"] and text.strip() == str(code_of(last)):
                state["noted"].append(last)
                r = 0.1
            return "notebook: " + " ".join(state["notebook"]), r, dict(effect, note=text)
        try:
            value = int(arg)
        except (TypeError, ValueError):
            return "error: answer needs a number", 0.0, effect
        state["done"] = True
        state["solved"] = value == sum(code_of(p) for p in state["pages"])
        return "answered", (0.4 if state["solved"] else 0.0), effect

    def close(self, req):
        with self.lock:
            if req.get("id") in self.sessions:
                self._write({"t": "close", "id": req["id"]})
        return {}

    def stats(self):
        with self.lock:
            return {"effects": sum(self.effects.values()), "keys": len(self.effects),
                    "repeated": sorted(k for k, n in self.effects.items() if n > 1),
                    "sessions": len(self.sessions), "answers": len(self.answers)}


class Handler(BaseHTTPRequestHandler):
    env = None

    def log_message(self, fmt, *args):
        pass

    def _send(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status, message):
        self._send(status, {"error": {"class": "data" if status < 500 else "infra", "message": message}})

    def do_GET(self):
        if self.path == "/stats":
            self._send(200, self.env.stats())
        else:
            self._error(404, "no endpoint GET %s" % self.path)

    def do_POST(self):
        try:
            n = int(self.headers.get("Content-Length") or 0)
            if n > 8 << 20:
                raise BadRequest(400, "body too large")
            req = json.loads(self.rfile.read(n) or b"null")
            if not isinstance(req, dict):
                raise BadRequest(400, "body must be a JSON object")
            if self.path == "/reset":
                out = self.env.reset(req)
            elif self.path == "/step":
                out = self.env.step(req)
            elif self.path == "/close":
                out = self.env.close(req)
            elif self.path in ("/snapshot", "/restore"):
                raise BadRequest(501, "this environment cannot snapshot")
            else:
                raise BadRequest(404, "no endpoint %s" % self.path)
        except BadRequest as e:
            self._error(e.status, str(e))
            return
        except ValueError as e:
            self._error(400, "bad request body: %s" % e)
            return
        self._send(200, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8092)
    ap.add_argument("--journal", required=True, help="journal file (created; read back on restart)")
    a = ap.parse_args()
    Handler.env = Env(a.journal)
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    print("notebook env on http://%s:%d" % (a.host, srv.server_address[1]), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
