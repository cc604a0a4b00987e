#!/usr/bin/env python3
"""Writes notebook.jsonl (tasks) and notebook-demos.jsonl (demonstrations)
for notebook_env.py: python3 make_data.py (deterministic)."""
import json
import random

from notebook_env import code_of

rng = random.Random(16)
with open("notebook.jsonl", "w") as tasks, open("notebook-demos.jsonl", "w") as demos:
    for i in range(224):
        pages = rng.sample(range(1, 60), 3)
        task = {"params": {"pages": pages}}
        row = {"id": "nb-%03d" % i, "task": task}
        if i < 192:
            tasks.write(json.dumps(row) + "\n")
        else:  # demonstrations use tasks the RL dataset does not have
            calls = []
            for p in pages:
                calls += ["read %d" % p, "note %d" % code_of(p)]
            calls.append("answer %d" % sum(code_of(p) for p in pages))
            demos.write(json.dumps({"task": dict(task, id=row["id"]), "calls": calls}) + "\n")
