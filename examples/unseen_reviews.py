"""Write a CSV of IMDB reviews that fine-tuning in RUN never saw: the whole test split, then train
reviews outside the run's --train-limit sample (same seeded rule), drawn at random (the split is
stored grouped by label), up to N in all.

    python examples/unseen_reviews.py RUN N OUT.csv
"""

import csv
import json
import random
import sys
from pathlib import Path

from bertkit.tasks import load_examples
from bertkit.tasks.readers import sample

run, wanted, target = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
settings = json.loads((run / "task.json").read_text())["settings"]
train = load_examples("classification", "imdb", "train")
used = {e.text for e in sample(train, settings["train_limit"], settings["seed"])}
rows = load_examples("classification", "imdb", "test")
rest = [e for e in train if e.text not in used]
rows += random.Random(0).sample(rest, min(len(rest), max(0, wanted - len(rows))))
with open(target, "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(["text", "label"])
    writer.writerows([e.text, e.label] for e in rows)
print(f"{target}: {len(rows)} reviews unseen by fine-tuning", file=sys.stderr)
