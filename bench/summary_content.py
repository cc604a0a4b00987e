#!/usr/bin/env python3
"""What the summaries of a recall run keep (docs/results.md, the summary study).

    bench/summary_content.py LONGHAUL_BINARY RUN_DIR STEP [STEP ...]

For every rollout trained in each STEP (read with `longhaul inspect RUN_DIR
--rollouts --step N --json` and `longhaul inspect RUN_DIR rollout ID --json`,
so it depends on the CLI only), it finds the episode's code (the uppercase
letter of its observations) and the summary calls (the calls whose prompt ends
with the summary request), and prints: the rollouts' success rate, the share of
summaries that hold the code once it has been seen, the share that hold nothing
but the code, and the mean summary length in letters. Standard library only.
"""
import json
import re
import subprocess
import sys

OBS = re.compile(r"<\|user\|>([A-Za-z]+)<\|end\|>")
REQUEST = "<|user|>summarize<|end|><|assistant|>"


def inspect(binary, *args):
    out = subprocess.run([binary, "inspect", *args, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def step_stats(binary, run, step):
    rows = inspect(binary, run, "--rollouts", "--step", str(step))
    n = ok = summaries = kept = only = letters = 0
    for row in rows:
        r = inspect(binary, run, "rollout", row["id"])
        n += 1
        ok += bool(r["success"])
        seen = set()
        for call in r["calls"]:
            if not call["selected"]:
                continue
            prompt = call["prompt_suffix"]
            for obs in OBS.findall(prompt):
                if obs not in ("recall", "summarize"):
                    seen.update(c for c in obs if c.isupper())
            if prompt.endswith(REQUEST) and seen:
                text = call["sampled"].replace("<|end|>", "")
                summaries += 1
                letters += len(text)
                has = any(c in text for c in seen)
                kept += has
                only += has and all(c in seen for c in text)
    return n, ok, summaries, kept, only, letters


def main():
    binary, run, steps = sys.argv[1], sys.argv[2], sys.argv[3:]
    for step in steps:
        n, ok, s, kept, only, letters = step_stats(binary, run, int(step))
        if n == 0:
            print("%s step %s: no rollouts" % (run, step))
            continue
        d = max(s, 1)
        print("%s step %s: %d rollouts, success %.2f; %d summaries after the code arrived: %.2f hold the code, "
              "%.2f nothing else, %.1f letters on average" % (run, step, n, ok / n, s, kept / d, only / d, letters / d))


if __name__ == "__main__":
    main()
