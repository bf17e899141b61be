"""A SWAG-like multiple-choice set from real text: each Rotten Tomatoes sentence (the built-in
set's fixed train / dev / test split) is cut in two; the first half is the context, and the
choices are its real second half and three second halves of other sentences of the same split
with about as many words (so length gives nothing away). Writes DIR/{train,dev,test}.jsonl with
text, choices and label (the real ending's index). Usage: python examples/endings.py DIR"""

import json
import random
import sys
from pathlib import Path

from bertkit.tasks import load_examples

CHOICES = 4


def endings(split: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    halves = []
    for record in load_examples("classification", "rotten-tomatoes", split):
        words = record.text.split()
        if len(words) >= 8:
            halves.append((" ".join(words[:len(words) // 2]), words[len(words) // 2:]))
    by_length = sorted(range(len(halves)), key=lambda i: len(halves[i][1]))
    place = {i: k for k, i in enumerate(by_length)}
    rows = []
    for i, (context, ending) in enumerate(halves):
        k = place[i]
        near = [j for j in by_length[max(0, k - 20):k + 21] if j != i]  # the 40 nearest in length
        choices = [" ".join(ending)] + [" ".join(halves[j][1]) for j in rng.sample(near, CHOICES - 1)]
        right = rng.randrange(CHOICES)
        choices[0], choices[right] = choices[right], choices[0]
        rows.append({"text": context, "choices": choices, "label": right})
    return rows


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/endings-data")
    out.mkdir(parents=True, exist_ok=True)
    for seed, split in enumerate(("train", "dev", "test")):
        rows = endings(split, seed)
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{out / split}.jsonl: {len(rows)} contexts with {CHOICES} choices each")
