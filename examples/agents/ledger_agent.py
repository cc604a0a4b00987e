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


def main():
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
        try:
            rep = post(base + "/chat/completions", {"model": "policy", "messages": msgs}, compacted)
        except urllib.error.HTTPError as e:
            if e.code == 400:  # a rollout limit: stop, longhaul seals the rollout
                break
            raise
        text = rep["choices"][0]["message"]["content"] or ""
        answered += 1
        if text.strip() == str(balance):
            correct += 1
        if i + 1 < len(deltas):
            turns.append([{"role": "assistant", "content": text},
                          {"role": "user", "content": "%+d" % deltas[i + 1]}])
    reward = correct / len(deltas)
    post(os.environ["LONGHAUL_REWARD_URL"], {"reward": reward, "success": correct == len(deltas)})
    print("answered %d, correct %d" % (answered, correct), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
