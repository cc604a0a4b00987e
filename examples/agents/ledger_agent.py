#!/usr/bin/env python3
"""An external agent for `env.kind: agent` (Python standard library only):
it plays the ledger task (docs/rollouts.md) as its own program, talking to
the model through the OpenAI chat endpoint longhaul serves per rollout.

It reads the task from $LONGHAUL_TASK, sends the start and each delta as a
user message, keeps only the first message and its last two turns in
context (its own compaction, declared to longhaul with the
X-Longhaul-Compaction header on the first call after each rewrite),
scores each answer against the true balance mod 10 itself, and posts the
reward to $LONGHAUL_REWARD_URL before exiting 0.

Options: --stream asks for server-sent events (stream: true, with
stream_options.include_usage) and reassembles the reply from the chunks
(--stream-odd: only on odd-numbered calls, so one run uses both forms);
--tools offers an `answer(balance)` function tool and takes the answer from
the reply's tool call when the model makes one (each call is answered with a
tool message before the next delta).
"""
import json
import os
import sys
import urllib.error
import urllib.request


def post(url, body, compacted=False):
    headers = {
        "Content-Type": "application/json",
        "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", ""),
    }
    if compacted:
        headers["X-Longhaul-Compaction"] = "1"
    req = urllib.request.Request(url, json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


ANSWER_TOOL = {"type": "function", "function": {
    "name": "answer", "description": "Give the balance mod 10.",
    "parameters": {"type": "object", "properties": {"balance": {"type": "integer"}},
                   "required": ["balance"]}}}


def stream(url, body, compacted=False):
    """POSTs a streaming request and rebuilds the message from its SSE chunks."""
    headers = {
        "Content-Type": "application/json",
        "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", ""),
    }
    if compacted:
        headers["X-Longhaul-Compaction"] = "1"
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(url, json.dumps(body).encode(), headers)
    content, calls, finish, usage, done = "", [], None, None, False
    with urllib.request.urlopen(req, timeout=120) as r:
        if not r.headers.get("Content-Type", "").startswith("text/event-stream"):
            raise RuntimeError("stream: Content-Type %r" % r.headers.get("Content-Type"))
        for raw in r:
            line = raw.decode().rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk["choices"]:
                delta = ch.get("delta") or {}
                content += delta.get("content") or ""
                for tc in delta.get("tool_calls") or []:
                    while len(calls) <= tc["index"]:
                        calls.append({"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                    c = calls[tc["index"]]
                    c["id"] = tc.get("id") or c["id"]
                    fn = tc.get("function") or {}
                    c["function"]["name"] += fn.get("name") or ""
                    c["function"]["arguments"] += fn.get("arguments") or ""
                finish = ch.get("finish_reason") or finish
    if not done or usage is None or finish is None:
        raise RuntimeError("stream ended without [DONE], usage or finish_reason")
    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    return {"choices": [{"message": msg, "finish_reason": finish}], "usage": usage}


def main():
    use_stream = "--stream" in sys.argv[1:]
    stream_odd = "--stream-odd" in sys.argv[1:]
    use_tools = "--tools" in sys.argv[1:]
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    task = json.loads(os.environ["LONGHAUL_TASK"])
    p = task.get("params") or {}
    start, deltas = p["start"], p["deltas"]
    first = {"role": "user", "content": "start %d %+d" % (start, deltas[0])}
    turns = []  # [assistant, next user] pairs
    balance, correct, answered = start, 0, 0
    for i, d in enumerate(deltas):
        balance = (balance + d) % 10
        msgs = [first] + [m for t in turns[-2:] for m in t]
        # Past two turns the window drops the oldest: the context no longer
        # extends the previous call's, and the agent says so.
        compacted = len(turns) > 2
        body = {"model": "policy", "messages": msgs}
        if use_tools:
            body["tools"] = [ANSWER_TOOL]
        try:
            streamed = use_stream or (stream_odd and i % 2 == 1)
            rep = (stream if streamed else post)(base + "/chat/completions", body, compacted)
        except urllib.error.HTTPError as e:
            if e.code == 400:  # a rollout limit: stop, longhaul seals the rollout
                break
            raise
        msg = rep["choices"][0]["message"]
        text = msg.get("content") or ""
        answer = text.strip()
        reply = {"role": "assistant", "content": text}
        tail = []
        for c in msg.get("tool_calls") or []:
            # Echo the calls and answer each: the next prompt renders them.
            reply.setdefault("tool_calls", []).append(c)
            tail.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"], "content": "noted"})
            try:
                answer = str(json.loads(c["function"]["arguments"]).get("balance"))
            except (ValueError, AttributeError):
                pass
        answered += 1
        if answer == str(balance):
            correct += 1
        if i + 1 < len(deltas):
            turns.append([reply] + tail + [{"role": "user", "content": "%+d" % deltas[i + 1]}])
    reward = correct / len(deltas)
    post(os.environ["LONGHAUL_REWARD_URL"], {"reward": reward, "success": correct == len(deltas)})
    print("answered %d, correct %d" % (answered, correct), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
