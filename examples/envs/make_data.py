#!/usr/bin/env python3
"""Writes notebook.jsonl (tasks) and notebook-demos.jsonl (demonstrations)
for notebook_env.py: python3 make_data.py (deterministic).

Pages are one digit (1-9), a copy the byte-level model learns from the
demonstrations; the demonstrations' page lists are ones the RL dataset does
not have, so what the warm start teaches is the procedure, not answers."""
import json
import random

from notebook_env import code_of

rng = random.Random(16)
seen = set()
with open("notebook.jsonl", "w") as tasks:
    for i in range(192):
        pages = rng.sample(range(1, 10), 3)
        seen.add(tuple(pages))
        tasks.write(json.dumps({"id": "nb-%03d" % i, "task": {"params": {"pages": pages}}}) + "\n")
with open("notebook-demos.jsonl", "w") as demos:
    i = 192
    while i < 192 + 128:
        pages = rng.sample(range(1, 10), 3)
        if tuple(pages) in seen:
            continue
        seen.add(tuple(pages))
        calls = []
        for p in pages:
            calls += ["read %d" % p, "note %d" % code_of(p)]
        calls.append("answer %d" % sum(code_of(p) for p in pages))
        demos.write(json.dumps({"task": {"params": {"pages": pages}, "id": "nb-%03d" % i}, "calls": calls}) + "\n")
        i += 1
