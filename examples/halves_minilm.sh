#!/usr/bin/env bash
# Sentence embeddings on real text: all-MiniLM-L6-v2 fine-tuned with in-batch negatives to find
# each IMDB review's second half from its first (examples/review_halves.py), 17,662 train pairs,
# early-stopped on 500 dev pairs, scored on the test split: before (the released model) and after.
# About 8 minutes on 2 CPU cores with bf16. Usage: examples/halves_minilm.sh [OUT]
source "$(dirname "$0")/common.sh"
OUT=${1:-runs/halves-minilm}
DATA=${DATA:-runs/halves-data}

[ -f "$DATA/test.csv" ] || $BIN/python examples/review_halves.py "$DATA"
mkdir -p "$OUT"
[ -f "$OUT/released_test_metrics.json" ] || $BIN/bertkit evaluate --model "$MINILM" --task embedding \
    --data "$DATA/test.csv" --out "$OUT/released_test_metrics.json"
[ -f "$OUT/metrics.json" ] || $BIN/bertkit finetune --task embedding --model "$MINILM" \
    --train "$DATA/train.csv" --eval "$DATA/dev.csv" --out "$OUT" --max-length 128 \
    --eval-limit 500 --epochs 1 --eval-every 100 --batch-size 32
$BIN/bertkit evaluate --model "$OUT" --data "$DATA/test.csv" --out "$OUT/test_metrics.json"
