"""The attention explorer: one self-contained HTML file (no network, no CDN; it opens from disk)
with every attention map of one input inline as JSON. The page itself is in explorer_page.py.

Data (the JSON in <script id="attention-data">): model, text, text_pair, tokens (T labels),
segments (T: 0 = sentence A, 1 = sentence B), num_layers, num_heads, scale, and attention[l][h]:
the (T, T) map of layer l, head h flattened row-major (query i, key j at i * T + j), as integers
weight * scale rounded (scale 1000: three decimals; a 12-layer, 12-head model at 64 tokens makes
a file of about 1.4 MB; all-MiniLM-L6-v2, 6 x 12, about 0.7 MB).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

from .attention import AttentionMaps
from .explorer_page import page

SCALE = 1000


def explorer_data(maps: AttentionMaps) -> dict:
    L, N, T = maps.num_layers, maps.num_heads, len(maps.tokens)
    quantized = np.rint(maps.attentions * SCALE).astype(np.int32).reshape(L, N, T * T)  # (L, N, T*T)
    return {"model": maps.model, "text": maps.text, "text_pair": maps.text_pair, "tokens": maps.tokens,
            "segments": maps.segments, "num_layers": L, "num_heads": N, "scale": SCALE,
            "attention": quantized.tolist()}


def write_explorer(maps: AttentionMaps, path: Path) -> Path:
    path = Path(path)
    data = json.dumps(explorer_data(maps), separators=(",", ":"), ensure_ascii=False)
    # Inside <script>, "</" could close the element early (RoBERTa's "</s>"); "<\/" is the same JSON.
    data = data.replace("</", "<\\/").replace("<!--", "<\\u0021--")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(html.escape(f"Attention: {maps.model}"), data), encoding="utf-8")
    return path
