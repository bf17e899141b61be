"""Text pairs for sentence-embedding fine-tuning from real text: the middle of each IMDB review
(the built-in set's fixed train / dev / test split) cut in two, 48 words before its midpoint and
48 after, as `text` and `text_pair` without a score. A model that embeds well finds each first
half's own second half among all the split's second halves. Writes DIR/{train,dev,test}.csv.
Usage: python examples/review_halves.py DIR"""

import csv
import sys
from pathlib import Path

from bertkit.tasks import load_examples

WORDS = 48


def halves(split: str) -> list[tuple[str, str]]:
    pairs = []
    for record in load_examples("classification", "imdb", split):
        words = record.text.replace("<br />", " ").split()
        if len(words) >= 2 * WORDS:
            middle = len(words) // 2
            pairs.append((" ".join(words[middle - WORDS:middle]), " ".join(words[middle:middle + WORDS])))
    return pairs


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/halves-data")
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        rows = halves(split)
        with open(out / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "text_pair"])
            writer.writerows(rows)
        print(f"{out / split}.csv: {len(rows)} pairs")
