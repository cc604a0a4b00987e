#!/usr/bin/env python3
"""An external agent that plays the built-in guess task through a function
tool, for `env.kind: agent` (Python standard library only).

It reads the task from $LONGHAUL_TASK (params: size, secret), offers one
tool, guess(n), and asks the model through the OpenAI chat endpoint longhaul
serves per rollout. Each tool call is echoed back with its answer as a tool
message ("higher", "lower" or "correct"), so the next prompt holds the whole
exchange as the chat template renders it. A reply without a tool call gets
a user message asking for one. The episode ends at "correct" or after
--max-guesses model calls; the reward is 1 for finding the number, else 0,
posted to $LONGHAUL_REWARD_URL.

    longhaul train --config examples/qwen3-guess-agent.yaml model.path=qwen3-tiny

`--demos N --size S --seed K` instead prints N demonstrations for
warmstart.data (the binary search, written as the Qwen3 template writes a
tool call), one JSON line per episode.
"""
import json
import os
import random
import sys
import urllib.error
import urllib.request

GUESS_TOOL = {"type": "function", "function": {
    "name": "guess", "description": "Guess the secret number.",
    "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}


def arg(name, default):
    argv = sys.argv[1:]
    if name in argv:
        return int(argv[argv.index(name) + 1])
    return default


def post(url, body):
    headers = {"Content-Type": "application/json",
               "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")}
    req = urllib.request.Request(url, json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def feedback(n, secret):
    if n == secret:
        return "correct"
    return "higher" if secret > n else "lower"


def tool_call_text(n):
    """A guess(n) call as the Qwen3 template renders an assistant tool call."""
    return '<tool_call>\n{"name": "guess", "arguments": {"n": %d}}\n</tool_call>' % n


def demos(count, size, seed):
    rnd = random.Random(seed)
    for i in range(count):
        secret = rnd.randrange(size)
        lo, hi, calls = 0, size - 1, []
        while True:
            n = (lo + hi) // 2
            calls.append(tool_call_text(n))
            f = feedback(n, secret)
            if f == "correct":
                break
            lo, hi = (n + 1, hi) if f == "higher" else (lo, n - 1)
        print(json.dumps({"task": {"id": "guess-demo-%d" % i, "prompt": "guess 0-%d" % (size - 1),
                                   "params": {"size": size, "secret": secret}}, "calls": calls}))


def main():
    if "--demos" in sys.argv[1:]:
        demos(arg("--demos", 100), arg("--size", 8), arg("--seed", 1))
        return 0
    max_guesses = arg("--max-guesses", 4)
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    task = json.loads(os.environ["LONGHAUL_TASK"])
    p = task.get("params") or {}
    secret = p["secret"]
    messages = [{"role": "user", "content": task.get("prompt") or "guess 0-%d" % (p["size"] - 1)}]
    found, calls = False, 0
    for _ in range(max_guesses):
        try:
            rep = post(base + "/chat/completions", {"model": "policy", "messages": messages, "tools": [GUESS_TOOL]})
        except urllib.error.HTTPError as e:
            if e.code == 400:  # a rollout limit: stop, longhaul seals the rollout
                break
            raise
        msg = rep["choices"][0]["message"]
        reply = {"role": "assistant", "content": msg.get("content")}
        if msg.get("tool_calls"):
            reply["tool_calls"] = msg["tool_calls"]
        messages.append(reply)
        answers = []
        for c in msg.get("tool_calls") or []:
            calls += 1
            try:
                n = int(json.loads(c["function"]["arguments"])["n"])
                answer = feedback(n, secret)
            except (ValueError, KeyError, TypeError):
                answer = "error: want {\"n\": integer}"
            found = found or answer == "correct"
            answers.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"], "content": answer})
        if found:
            break
        messages.extend(answers or [{"role": "user", "content": "Call guess(n)."}])
    post(os.environ["LONGHAUL_REWARD_URL"], {"reward": 1.0 if found else 0.0, "success": found})
    print("tool calls %d, found %s" % (calls, found), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
