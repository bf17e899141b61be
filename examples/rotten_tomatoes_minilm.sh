#!/usr/bin/env bash
# The real all-MiniLM-L6-v2 fine-tuned on Rotten Tomatoes sentence polarity: the whole fixed
# train split (80%), early stopping on dev (10%), scored on test (10%; dev and test are the
# held-out 20%). About 10 minutes on 2 CPU cores with bf16. Usage: examples/rotten_tomatoes_minilm.sh [OUT]
source "$(dirname "$0")/common.sh"
OUT=${1:-runs/rt-minilm}

[ -f "$OUT/metrics.json" ] || $BIN/bertkit finetune --task classification --model "$MINILM" \
    --train rotten-tomatoes --eval rotten-tomatoes --out "$OUT" --max-length 64 \
    --epochs 2 --patience 2 --lr 1e-4 --batch-size 32
$BIN/bertkit evaluate --model "$OUT" --data rotten-tomatoes --split test --out "$OUT/test_metrics.json"
