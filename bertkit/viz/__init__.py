"""Seeing inside: attention maps and an HTML attention explorer, DeBERTa's score terms, the
distillation temperature, the families compared, training curves.

    from bertkit import viz
    maps = viz.attention_maps(model, "The cat sat on the mat.")   # (L, N, T, T) probabilities
    viz.write_pngs(maps, "out/")                                   # grid + one PNG per layer
    viz.write_explorer(maps, "out/attention.html")                 # open it in a browser

The command line (`bertkit visualize ...`, `bertkit compare`) is in commands.py. matplotlib is
imported only when a picture is drawn, through its Figure API (no pyplot state).
"""

from .attention import AttentionMaps, attention_maps, maps_of, plot_grid, plot_layer, write_pngs
from .compare import compare, plot_comparison
from .curves import plot_curves
from .deberta import plot_components, score_components
from .distillation import plot_temperatures
from .explorer import explorer_data, write_explorer
from .inputs import encode, load_model

__all__ = ["AttentionMaps", "attention_maps", "compare", "encode", "explorer_data", "load_model", "maps_of",
           "plot_comparison", "plot_components", "plot_curves", "plot_grid", "plot_layer", "plot_temperatures",
           "score_components", "write_explorer", "write_pngs"]
