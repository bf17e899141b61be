#!/usr/bin/env bash
# Multiple choice on real text: all-MiniLM-L6-v2 picks each Rotten Tomatoes half-sentence's real
# ending among four (examples/endings.py), trained on the train split, early-stopped on dev,
# scored on test. About 15 minutes on 2 CPU cores with bf16. Usage: examples/endings_minilm.sh [OUT]
source "$(dirname "$0")/common.sh"
OUT=${1:-runs/endings-minilm}
DATA=${DATA:-runs/endings-data}

[ -f "$DATA/test.jsonl" ] || $BIN/python examples/endings.py "$DATA"
[ -f "$OUT/metrics.json" ] || $BIN/bertkit finetune --task multiple-choice --model "$MINILM" \
    --train "$DATA/train.jsonl" --eval "$DATA/dev.jsonl" --out "$OUT" --max-length 64 \
    --epochs 2 --patience 2 --lr 1e-4 --batch-size 16
$BIN/bertkit evaluate --model "$OUT" --data "$DATA/test.jsonl" --out "$OUT/test_metrics.json"
