"""Seeing inside (bertkit.viz): every picture rendered from tiny models and checked as a file,
the explorer's data and its behaviour in a real browser, DeBERTa's score terms adding up to the
model's scores, and the `visualize` / `compare` commands with their one-line errors."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit
from bertkit import PRESETS
from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.viz import figure as F
from bertkit.viz.attention import AttentionMaps, attention_maps, write_pngs
from bertkit.viz.compare import compare, count_parameters, plot_comparison
from bertkit.viz.curves import plot_curves, read_log
from bertkit.viz.deberta import plot_components, score_components
from bertkit.viz.distillation import plot_temperatures, softmax
from bertkit.viz.explorer import write_explorer
from bertkit.viz.inputs import encode
from conftest import randomize

CHROMEDRIVER = Path("/usr/bin/chromedriver")
SENTENCE = "The cat sat on the mat because it was tired."
PAIR = "It slept all afternoon."


def tiny(name: str, vocab_size: int, **overrides) -> bertkit.Model:
    """A 2-layer, 4-head, 32-wide copy of a preset with the MiniLM vocabulary, weights spread
    out (randomize) so that attention is far from uniform."""
    base = PRESETS[name].config
    fields = {f.name for f in dataclasses.fields(base)}
    small = dict(num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64, max_positions=64,
                 vocab_size=vocab_size, pad_token_id=0, hidden_dropout=0.0, attention_dropout=0.0)
    if "position_buckets" in fields and base.position_buckets > 0:
        small["position_buckets"] = 16
    if "embedding_size" in fields and base.embedding_size:
        small["embedding_size"] = 16
    torch.manual_seed(0)
    model = bertkit.build(base.replace(**{**small, **overrides}))
    randomize(model, seed=1)
    return model.eval()


@pytest.fixture(scope="module")
def bert(tokenizer):
    model = tiny("bert-base", tokenizer.vocab_size)
    model.tokenizer = tokenizer
    return model


def read_explorer_data(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="attention-data">(.*?)</script>', text, re.S)
    assert match, "no inline attention data"
    return json.loads(match.group(1))


def assert_picture(path: Path, min_width: int = 300, min_height: int = 200) -> np.ndarray:
    """A real PNG of a sensible size with a drawing in it (not one flat colour)."""
    from PIL import Image

    assert path.is_file() and path.stat().st_size > 5_000, path
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.width >= min_width and image.height >= min_height, image.size
        pixels = np.asarray(image.convert("L"), dtype=np.float64)
    assert pixels.std() > 15, f"{path.name} looks blank (pixel std {pixels.std():.1f})"
    assert (pixels < 200).mean() > 0.02, f"{path.name} has almost nothing drawn"
    return pixels


# ---- attention maps, PNGs and the explorer's data ---------------------------------------------

@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_gives_maps_and_an_explorer_with_every_layer_and_head(name, tokenizer, tmp_path):
    model = tiny(name, tokenizer.vocab_size)
    model.tokenizer = tokenizer
    model.train()
    maps = attention_maps(model, SENTENCE, PAIR)
    assert model.training  # a picture taken during training leaves dropout on
    T = len(maps.tokens)
    assert maps.attentions.shape == (2, 4, T, T)
    assert np.allclose(maps.attentions.sum(-1), 1.0, atol=1e-5)
    assert maps.segments == [0] * maps.boundary + [1] * (T - maps.boundary)
    assert maps.tokens[maps.boundary - 1] == "[SEP]" and maps.tokens[maps.boundary] == "it"
    data = read_explorer_data(write_explorer(maps, tmp_path / "a.html"))
    assert (data["num_layers"], data["num_heads"], data["tokens"]) == (2, 4, maps.tokens)
    assert len(data["attention"]) == 2 and all(len(layer) == 4 for layer in data["attention"])
    for l in range(2):
        for h in range(4):
            flat = np.array(data["attention"][l][h]).reshape(T, T) / data["scale"]
            assert np.abs(flat - maps.attentions[l, h]).max() <= 0.5 / data["scale"] + 1e-6


def test_maps_come_from_the_explicit_path_and_match_the_model(bert):
    encoded = encode(bert, SENTENCE, PAIR)
    maps = attention_maps(bert, SENTENCE, PAIR)
    with torch.no_grad():
        out = bert(encoded.ids, torch.ones_like(encoded.ids), encoded.types, output_attentions=True)
    for l, a in enumerate(out.attentions):
        assert np.allclose(maps.attentions[l], a[0].numpy(), atol=1e-6)
    assert encoded.ids[0].tolist() == bert.tokenizer.encode(SENTENCE, PAIR)
    assert encoded.types[0].tolist() == bert.tokenizer([SENTENCE], [PAIR])["token_type_ids"][0].tolist()


def test_text_longer_than_the_model_is_truncated_with_a_warning(bert):
    long = " ".join(["word"] * 100)
    with pytest.warns(UserWarning, match="at most 64"):
        encoded = encode(bert, long, "short pair")
    assert encoded.ids.shape == (1, 64) and encoded.truncated == 100 + 2 + 3 - 64
    assert encoded.tokens.count("pair") == 1  # the longer part was cut first
    # the text shown over the maps (the explorer's header) is what the tokens cover, not all of it
    assert (encoded.text, encoded.text_pair) == (" ".join(["word"] * (64 - 2 - 3)) + " \u2026", "short pair")
    with pytest.warns(UserWarning):
        assert attention_maps(bert, long).text == " ".join(["word"] * (64 - 2)) + " \u2026"
    for bad, message in (("", "empty"), ("   ", "empty")):
        with pytest.raises(BertkitError, match=message):
            encode(bert, bad)
    with pytest.raises(BertkitError, match="between 1 and the model's maximum of 64"):
        encode(bert, "hi", max_length=65)


def test_roberta_pair_segments_come_from_the_frame_not_the_type_ids(tokenizer):
    model = tiny("roberta-base", tokenizer.vocab_size)  # type_vocab_size 1: every type id is 0
    model.tokenizer = tokenizer
    encoded = encode(model, "one two", "three")
    assert encoded.types.sum() == 0
    assert encoded.segments == [0, 0, 0, 0, 1, 1]


def test_attention_pngs_at_64_tokens(bert, tmp_path):
    text = " ".join(f"w{i}" for i in range(40))
    with pytest.warns(UserWarning):
        maps = attention_maps(bert, text, "and a second sentence of words", description="tiny bert")
    assert len(maps.tokens) == 64
    grid, *layers = write_pngs(maps, tmp_path)
    assert [p.name for p in layers] == ["attention_layer_0.png", "attention_layer_1.png"]
    assert_picture(grid, 500, 400)
    for p in layers:  # 4 heads in a row, each 64 x 8 pt = 7.1 inches (710 pixels): every label readable
        pixels = assert_picture(p, 4 * 710, 710)
        assert pixels.shape[1] < 4000


@pytest.mark.parametrize("inches, thinned", [(64 * 8 / 72, False), (1.5, True)])
def test_token_labels_never_overlap(inches, thinned):
    """Draw 64 long token labels on both axes of a heatmap of the given size and check that no
    two neighbouring labels' boxes overlap; the small grid cell shows every k-th label."""
    tokens = [f"token{i:02d}" for i in range(64)]
    fig = F.figure(inches + 2, inches + 2)
    ax = fig.add_axes((1.5 / (inches + 2), 1.5 / (inches + 2), inches / (inches + 2), inches / (inches + 2)))
    ax.imshow(np.random.default_rng(0).random((64, 64)))
    F.token_axes(ax, tokens, inches)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    for labels, axis in ((ax.get_xticklabels(), 0), (ax.get_yticklabels(), 1)):
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.get_points()[0][axis])
        assert (len(boxes) < 64) == thinned
        assert all(b.get_points()[1][axis] <= c.get_points()[0][axis] + 0.01 for b, c in zip(boxes, boxes[1:]))
        assert all(t.get_fontsize() >= F.MIN_FONT for t in labels)


def test_explorer_is_self_contained_and_escapes_its_data(tmp_path):
    tokens = ["<s>", "</s>", "</script>", "<!--", "\u00e9t\u00e9"]
    att = np.full((1, 2, 5, 5), 0.2, dtype=np.float32)
    maps = AttentionMaps("m </script>", "a", None, tokens, [0] * 5, att)
    path = write_explorer(maps, tmp_path / "x.html")
    html = path.read_text(encoding="utf-8")
    assert "://" not in html and "<link" not in html and "src=" not in html  # nothing from the network
    assert html.count("</script>") == 2  # the data and the code, nothing inside the data closes early
    assert "<title>Attention: m &lt;/script&gt;</title>" in html
    data = read_explorer_data(path)
    assert data["tokens"] == tokens and data["text_pair"] is None


# ---- DeBERTa's three terms ------------------------------------------------------------------

@pytest.mark.parametrize("name, terms", [("deberta-v3-xsmall", ("p2c", "c2p")), ("deberta-base", ("p2c", "c2p")),
                                         ("deberta-v3-xsmall", ("c2p",))])
def test_deberta_terms_add_up_to_the_models_scores(name, terms, tokenizer):
    model = tiny(name, tokenizer.vocab_size, pos_att_type=terms)
    model.tokenizer = tokenizer
    encoded = encode(model, "a new store opened beside the new mall", "nice")
    layer = 1
    parts = score_components(model, encoded, layer, head=2)
    assert set(parts.scores) == {"c2c", *terms, "combined"}
    assert np.allclose(parts.scores["combined"], sum(parts.scores[t] for t in ("c2c", *terms)), atol=1e-6)
    # the softmax of the sum is the attention the model's forward pass returned
    assert np.allclose(torch.tensor(parts.scores["combined"]).softmax(-1).numpy(), parts.attention, atol=1e-6)

    # Each term by its definition (eq. 2-4), element by element, from the layer's own input.
    attn = model.backbone.encoder.layer_for(layer).attn
    with torch.no_grad():
        x = model(encoded.ids, output_hidden_states=True).hidden_states[layer]  # (1, T, H)
        context = model.backbone.encoder.context(x.shape[1], x.device)
        q, k = attn.split_heads(attn.query(x))[0, 2], attn.split_heads(attn.key(x))[0, 2]  # (T, D)
        inputs = attn.score_inputs(**context)
        bias = attn.score_bias(attn.split_heads(attn.query(x)), attn.split_heads(attn.key(x)), **inputs)
        # the position terms together are what forward adds to Q K^T (score_bias)
        assert np.allclose(sum(parts.scores[t] for t in terms), bias[0, 2].numpy(), atol=1e-6)
        rel, span, T = context["rel_pos"], attn.span, x.shape[1]
        scale = (attn.head_dim * (1 + len(terms))) ** -0.5
        clamp = lambda d: min(max(int(d) + span, 0), 2 * span - 1)  # noqa: E731  (row of distance d)
        for i in range(T):
            for j in range(T):
                expect = {"c2c": q[i] @ k[j] * scale}
                if "c2p" in terms:
                    expect["c2p"] = q[i] @ inputs["pos_k"][0, 2, clamp(rel[i, j])] * scale
                if "p2c" in terms:  # key j against the query table at -delta(j, i), as the reference code has it
                    expect["p2c"] = k[j] @ inputs["pos_q"][0, 2, clamp(-rel[j, i])] * scale
                for t, value in expect.items():
                    assert math.isclose(parts.scores[t][i, j], value.item(), rel_tol=1e-4, abs_tol=1e-6), (t, i, j)


def test_deberta_components_png_and_errors(tokenizer, bert, tmp_path):
    model = tiny("deberta-v3-xsmall", tokenizer.vocab_size)
    model.tokenizer = tokenizer
    encoded = encode(model, SENTENCE, PAIR)
    assert_picture(plot_components(score_components(model, encoded, 0, 1, "tiny"), tmp_path / "d.png"), 1200, 250)
    with pytest.raises(BertkitError, match="layer 5 out of range"):
        score_components(model, encoded, 5, 0)
    with pytest.raises(BertkitError, match="head 9 out of range"):
        score_components(model, encoded, 0, 9)
    with pytest.raises(BertkitError, match="needs a DeBERTa model"):
        score_components(bert, encode(bert, SENTENCE), 0, 0)


# ---- distillation temperature, curves, compare ------------------------------------------------

def test_distillation_temperature_picture(tmp_path):
    z = np.array([3.0, 1.0, 0.0])
    assert np.allclose(softmax(z, 1.0), np.exp(z) / np.exp(z).sum())
    entropies = [-(p * np.log(p)).sum() for p in (softmax(z, t) for t in (0.5, 1, 2, 4))]
    assert entropies == sorted(entropies)  # hotter is flatter
    assert_picture(plot_temperatures(tmp_path / "t.png"), 800, 500)
    assert_picture(plot_temperatures(tmp_path / "u.png", [2.0, 1.0, -1.0], None, [1, 3]), 800, 500)
    with pytest.raises(BertkitError, match="positive"):
        plot_temperatures(tmp_path / "v.png", temperatures=[0.0])
    with pytest.raises(BertkitError, match="3 logits but 2 labels"):
        plot_temperatures(tmp_path / "v.png", [1, 2, 3], ["a", "b"])


def write_run(directory: Path, broken_last_line: bool = False) -> Path:
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    lines = []
    for step in range(1, 61):
        loss = 9 * math.exp(-step / 20) + 2 + rng.normal(0, 0.2)
        lines.append({"step": step, "split": "train", "lr": 1e-3 * min(1, step / 6), "tokens": step * 4096,
                      "loss": loss, "mlm_loss": loss, "mlm_accuracy": 0.5 - loss / 30, "grad_norm": 1 + rng.random()})
        if step % 10 == 0:
            lines.append({"step": step, "split": "eval", "loss": loss + 0.1, "mlm_loss": loss + 0.1,
                          "mlm_accuracy": 0.5 - loss / 30, "perplexity": math.exp(loss)})
    text = "".join(json.dumps(r) + "\n" for r in lines)
    (directory / "metrics.jsonl").write_text(text + ('{"step": 61, "spl' if broken_last_line else ""))
    return directory


def test_training_curves_from_run_directories(tmp_path):
    one, two = write_run(tmp_path / "one"), write_run(tmp_path / "two", broken_last_line=True)
    assert_picture(plot_curves([one], tmp_path / "c1.png"), 800, 500)
    with pytest.warns(UserWarning, match="unreadable last line"):
        assert len(read_log(two)) == 66
        assert_picture(plot_curves([one, two], tmp_path / "c2.png"), 800, 500)
    with pytest.raises(BertkitError, match="no such run directory"):
        read_log(tmp_path / "missing")
    with pytest.raises(BertkitError, match="no metrics.jsonl"):
        read_log(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.jsonl").write_text('nonsense\n{"step": 1, "split": "train", "loss": 1}\n')
    with pytest.raises(BertkitError, match=r"metrics.jsonl:1: not a metrics record"):
        read_log(tmp_path / "bad")


def test_steps_without_a_finite_value_are_marked_and_said(tmp_path, monkeypatch):
    """A NaN, infinity or null (as json_safe writes them) or a skipped step was left out and the
    curve drawn across it, without a word."""
    run = write_run(tmp_path / "run")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for r in records:  # a held-out loss and its one term, averaged in different orders
        if r["split"] == "eval":
            r["loss"] = r["mlm_loss"] * (1 + 4e-8)
    records[4].update(loss=float("nan"), mlm_loss=float("nan"))  # step 5
    records[5]["grad_norm"] = None  # step 6
    records[6] = {"step": 7, "split": "train", "lr": 1e-3, "skipped": True}
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    drawn, save = [], F.save
    monkeypatch.setattr(F, "save", lambda fig, p: drawn.append(fig) or save(fig, p))
    with pytest.warns(UserWarning, match=r"run: 3 step\(s\) logged no finite value \(step 5, 6, 7\)"):
        plot_curves([run], tmp_path / "c.png")
    for ax in drawn[0].axes:
        if ax.get_visible():
            red = [line.get_xdata()[0] for line in ax.lines if line.get_color() == "red"]
            assert red == [5, 6, 7], ax.get_title()
    losses = next(ax for ax in drawn[0].axes if ax.get_title() == "loss")
    assert [t.get_text() for t in losses.get_legend().get_texts()] == ["mlm_loss (train)", "mlm_loss (held out)",
                                                                       "no finite value"]  # "loss" is the same
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_curves([write_run(tmp_path / "clean")], tmp_path / "d.png")  # nothing to say
    drawn.clear()  # overlaid: the marks are the broken run's, in its colour, and say whose
    with pytest.warns(UserWarning, match=r"run: 3 step\(s\) .* marked by dotted lines of the run's colour"):
        plot_curves([tmp_path / "clean", run], tmp_path / "e.png")
    losses = next(ax for ax in drawn[0].axes if ax.get_title() == "loss")
    marks = [(line.get_xdata()[0], line.get_color(), line.get_label()) for line in losses.lines
             if line.get_linestyle() == ":" and len(set(line.get_xdata())) == 1]
    assert [m[:2] for m in marks] == [(5, "C1"), (6, "C1"), (7, "C1")] and marks[0][2] == "run: no finite value"
    records[4].update(loss=float("nan"), mlm_loss=3.0)  # only the total not finite: still said
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.warns(UserWarning, match=r"run: 3 step\(s\) logged no finite value \(step 5, 6, 7\)"):
        plot_curves([run], tmp_path / "f.png")


def test_each_runs_own_loss_picture_marks_steps_without_a_finite_loss(tmp_path, monkeypatch):
    """loss_curve.png, drawn at the end of every run, left a gap at a null loss (a NaN as
    json_safe writes it) and drew the line across a skipped step, with nothing marking either."""
    import matplotlib.pyplot as plt

    from bertkit.train import loop

    records = [{"step": s, "split": "train", "loss": 5.0 - s / 10} for s in range(1, 9)]
    records[2]["loss"] = None  # step 3
    records[5] = {"step": 6, "split": "train", "skipped": True}
    records.append({"step": 8, "split": "eval", "loss": float("inf")})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    drawn, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig) or close(fig))
    loop.plot_curves(tmp_path / "metrics.jsonl", tmp_path / "loss_curve.png")
    (ax,) = drawn[0].axes
    assert [line.get_xdata()[0] for line in ax.lines if line.get_color() == "red"] == [3, 6, 8]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["train loss", "no finite loss"]
    train = next(line for line in ax.lines if line.get_label() == "train loss")
    assert list(train.get_xdata()) == [1, 2, 4, 5, 7, 8]  # only finite points, joined


def test_compare_counts_exactly_and_measures(tmp_path):
    rows = compare(["mini-bert", "electra-small"], batch_size=1, length=16, repeats=1)
    assert [r.length for r in rows] == [16, 16]
    assert compare(["mini-bert"], batch_size=1, length=100, repeats=1)[0].length == 64  # its position table's size
    for row in rows:
        with torch.device("meta"):
            assert row.parameters == bertkit.build(row.preset).num_parameters()
        assert 0 < row.embedding_parameters < row.parameters
        assert row.weights_mib == row.parameters * 4 / 2**20
        assert row.tokens_per_second > 0
        assert row.forward_mib is None or row.forward_mib >= 0
    assert count_parameters("bert-base").parameters == 109_482_240
    assert_picture(plot_comparison(rows, tmp_path / "c.png", "test"), 800, 200)
    flat = [count_parameters(p) for p in ("mini-bert", "albert-base", "deberta-v3-base")]
    assert_picture(plot_comparison(flat, tmp_path / "p.png"), 300, 200)


# ---- the command line -------------------------------------------------------------------------

def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bertkit: error: "), err
    return err[0]


def test_cli_attention_from_a_checkpoint_and_a_preset(bert, tmp_path, capsys):
    bert.save_pretrained(tmp_path / "ckpt")
    out = tmp_path / "viz"
    assert main(["visualize", "attention", "--model", str(tmp_path / "ckpt"), "--text", SENTENCE,
                 "--text-pair", PAIR, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("attention_grid.png", "attention_layer_0.png", "attention_layer_1.png", "attention.html"):
        assert_picture(out / name) if name.endswith(".png") else None
        assert f"wrote {out / name}" in printed
    assert read_explorer_data(out / "attention.html")["model"] == "ckpt (bert)"

    long = " ".join(["movie"] * 80)
    assert main(["visualize", "attention", "--model", "mini-bert", "--text", long, "--layers", "none",
                 "--out", str(tmp_path / "preset")]) == 0
    captured = capsys.readouterr()
    assert "bertkit: warning: the input has 82 tokens but the model takes at most 64" in captured.err
    data = read_explorer_data(tmp_path / "preset" / "attention.html")
    assert len(data["tokens"]) == 64 and data["num_layers"] == 3 and data["num_heads"] == 4
    assert data["model"] == "mini-bert preset, random weights"
    assert not (tmp_path / "preset" / "attention_layer_0.png").exists()


def test_dollar_signs_in_names_and_tokens_are_drawn_as_they_are(bert, tmp_path, capsys):
    # matplotlib read them as math: a folder named m$x^{$ was a traceback, "price $5 and $6" lost its dollars
    from bertkit.viz.figure import plain, short

    assert plain("price $5 and $6") == r"price \$5 and \$6" and short("$") == r"\$"
    bert.save_pretrained(tmp_path / "m$x^{$")
    assert main(["visualize", "attention", "--model", str(tmp_path / "m$x^{$"), "--text", "it costs $5",
                 "--out", str(tmp_path / "viz")]) == 0
    assert_picture(tmp_path / "viz" / "attention_grid.png")
    run = tmp_path / "run$a^{$"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "split": "train", "loss": 5.0 - s}) + "\n"
                                               for s in (1, 2, 3)))
    assert main(["visualize", "curves", str(run), "--out", str(tmp_path / "curves")]) == 0
    assert_picture(next((tmp_path / "curves").glob("*.png")))


@pytest.mark.parametrize("lengths", [(80, 60), (60, 80), (70, 70), (45, 40)])
def test_a_long_pair_is_cut_as_transformers_cuts_it(bert, minilm_dir, lengths):
    """Longest first, with the tokenizers arithmetic that truncation="longest_first" uses: once
    the parts are equal, transformers takes the odd token from the second."""
    import transformers

    reference = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    text, pair = (" ".join(["movie"] * lengths[0]), " ".join(["plot"] * lengths[1]))
    with pytest.warns(UserWarning, match="the max length asked is 64"):
        ours = encode(bert, text, pair, max_length=64)
    expected = reference(text, pair, truncation="longest_first", max_length=64)["input_ids"]
    assert ours.ids[0].tolist() == expected


def test_cli_deberta_components(tokenizer, tmp_path, capsys):
    model = tiny("deberta-v3-xsmall", tokenizer.vocab_size)
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path / "deb")
    assert main(["visualize", "attention", "--model", str(tmp_path / "deb"), "--text", SENTENCE, "--layers", "1",
                 "--deberta-components", "--head", "3", "--out", str(tmp_path / "o")]) == 0
    assert_picture(tmp_path / "o" / "deberta_components_l1_h3.png", 1200, 250)


def test_a_picture_name_as_out_and_a_value_starting_with_a_dash_are_explained(tmp_path, capsys):
    assert main(["visualize", "distillation-temperature", "--out", str(tmp_path / "t.png")]) == 2
    assert capsys.readouterr().err == (f"bertkit: error: --out {tmp_path / 't.png'}: visualize writes a folder of "
                                       f"pictures, named after what they show; give a folder (e.g. --out "
                                       f"{tmp_path / 't'})\n")
    assert not (tmp_path / "t.png").exists()  # (a folder of that name was made)
    with pytest.raises(SystemExit):  # argparse reads -1,1 as an option of its own
        main(["visualize", "distillation-temperature", "--temperatures", "-1,1"])
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "argument --temperatures: expected one argument (--temperatures=-1,1 gives a value that starts with '-')")
    with pytest.raises(SystemExit):  # a value left out is only that
        main(["visualize", "distillation-temperature", "--temperatures"])
    assert capsys.readouterr().err.splitlines()[-1].endswith("argument --temperatures: expected one argument")


def test_temperature_candidates_are_named_by_their_text(reviews):
    # a byte-level BPE model's candidates were labelled with vocabulary entries ("Ġfilm")
    from bertkit.data import TokenizerSettings, train_tokenizer
    from bertkit.viz.distillation import drawn, mlm_logits

    tok = train_tokenizer(reviews, TokenizerSettings.for_family("roberta", vocab_size=600))
    torch.manual_seed(0)
    model = bertkit.build("roberta-base", head="mlm", vocab_size=tok.vocab_size, num_layers=1, hidden_size=32,
                          num_heads=4, intermediate_size=48, max_positions=64)
    model.tokenizer = tok
    with torch.no_grad():
        model.head.bias[tok.backend.token_to_id("Ġfilm")] = 50.0
    logits, labels, _, rest = mlm_logits(model.eval(), "A [MASK] to see.", top_k=6)
    assert labels[0] == "film" and not any(label.startswith("Ġ") for label in labels)
    # the bars are the candidates' share of the whole vocabulary's softened distribution, as the
    # distillation loss softens it, not a softmax over the 6 drawn ones
    ids = tok.encode("A <mask> to see.")
    with torch.no_grad():
        full = model(torch.tensor([ids])).logits[0, ids.index(tok.mask_token_id)].double()
    for tau in (1.0, 4.0):
        whole = torch.softmax(full / tau, -1)
        expected = [*whole.topk(6).values.tolist(), 1 - whole.topk(6).values.sum().item()]
        assert drawn(np.array(logits), rest, tau) == pytest.approx(expected, rel=1e-5)
    vocab = tok.backend.get_vocab()
    word = next(w for w in sorted(vocab) if w.isalpha() and len(w) > 2 and "Ġ" + w in vocab)  # "the", "Ġthe"
    with torch.no_grad():  # both read "the": two bars of one name, so they keep their entries
        model.head.bias[[vocab[word], vocab["Ġ" + word]]] = 60.0
    logits, labels, _, _ = mlm_logits(model, "A [MASK] to see.", top_k=40)
    assert len(set(labels)) == len(labels) and {word, "Ġ" + word} <= set(labels) and "\ufffd" not in "".join(labels)


def test_a_distillation_run_s_temperature_is_drawn_and_named(tmp_path, monkeypatch, minilm_dir):
    import bertkit.viz.distillation as distillation

    model = bertkit.build("mini-bert", head="mlm", num_layers=1, hidden_size=16, num_heads=2, intermediate_size=16)
    model.tokenizer = bertkit.load_tokenizer(minilm_dir)
    model.save_pretrained(tmp_path / "run")
    (tmp_path / "run" / "job.json").write_text(json.dumps({"objective": "distill", "loss": {"temperature": 3.0}}))
    drawn = {}
    monkeypatch.setattr(distillation, "plot_temperatures", lambda path, *args: drawn.update(args=args) or path)
    assert main(["visualize", "distillation-temperature", "--model", str(tmp_path / "run"), "--text", "a [MASK]",
                 "--out", str(tmp_path / "viz")]) == 0
    logits, labels, temperatures, context, rest, marked = drawn["args"]
    assert 3.0 in temperatures and marked[3.0] == "this run's" and len(logits) + len(rest) == model.config.vocab_size


def test_cli_pictures_and_compare(tmp_path, capsys):
    out = tmp_path / "viz"
    assert main(["visualize", "distillation-temperature", "--out", str(out)]) == 0
    assert_picture(out / "distillation_temperature.png")
    assert main(["visualize", "distillation-temperature", "--model", "mini-bert", "--text", "a [MASK] movie",
                 "--top-k", "5", "--temperatures", "1,3", "--out", str(tmp_path / "mlm")]) == 0
    assert_picture(tmp_path / "mlm" / "distillation_temperature.png")
    run = write_run(tmp_path / "run")
    assert main(["visualize", "curves", str(run), "--out", str(out)]) == 0
    assert_picture(out / "curves.png")
    assert main(["compare", "--presets", "mini-bert,electra-small", "--batch-size", "1", "--length", "16",
                 "--repeats", "1", "--out", str(out)]) == 0
    assert_picture(out / "compare.png")
    saved = json.loads((out / "compare.json").read_text())
    assert [r["preset"] for r in saved["rows"]] == ["mini-bert", "electra-small"]
    assert saved["settings"]["measured"] and saved["rows"][0]["tokens_per_second"] > 0
    assert main(["compare", "--parameters-only", "--out", str(tmp_path / "params")]) == 0
    rows = json.loads((tmp_path / "params" / "compare.json").read_text())["rows"]
    assert {r["preset"] for r in rows} >= {"bert-base", "roberta-base", "albert-base", "distilbert-base",
                                            "electra-small", "deberta-v3-base", "modernbert-base", "mini-bert"}
    assert all(r["tokens_per_second"] is None for r in rows)


def test_bench_picture_draws_each_records_ratio_and_ceiling(tmp_path, capsys, monkeypatch):
    """`visualize bench` reads what `bench --json` writes: one bar per record, as long as its
    ratio, and a mark at its ceiling where it has one."""
    from dataclasses import asdict

    from bertkit import bench
    from bertkit.viz import figure as F

    records = [asdict(bench.inference("mini-bert", [5, 9, 3], "fp32", 1, "tiny inference")),
               asdict(bench.mlm_training_step("mini-bert", 2, 16, "fp32", 1, "tiny step"))]
    records.append({**records[0], "dtype": "bf16", "ratio": 0.5, "ceiling": None})
    machine = ("a test machine, 2 cores (1 torch thread), bf16 emulated (no AVX512-BF16 or AMX: bf16 rows time the "
               "emulation, several times slower than fp32), torch 2.13.0+cpu, transformers 5.23.0")  # a real length
    for r in records:
        r["machine"] = machine  # bench.run fills it in; the picture's subtitle shows it
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(records))
    drawn, save = [], F.save
    monkeypatch.setattr(F, "save", lambda fig, p: drawn.append(fig) or save(fig, p))
    assert main(["visualize", "bench", str(path), "--out", str(tmp_path / "o")]) == 0
    assert_picture(tmp_path / "o" / "bench.png")
    assert " ".join(drawn[0]._suptitle.get_text().split()).endswith(machine)
    inside_the_picture(drawn[0])  # the subtitle and the axis label were cut off at both edges
    ax = drawn[0].axes[0]
    bars = [p for p in ax.patches if p.get_height() > 0]
    assert [b.get_width() for b in bars] == pytest.approx([r["ratio"] for r in records])
    marks = [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == "-"]
    assert marks == pytest.approx([r["ceiling"] for r in records if r["ceiling"]])
    assert records[0]["ceiling"] and not records[1]["ceiling"]  # inference has one, training none


def inside_the_picture(fig) -> None:
    """Everything a figure draws (titles, labels, ticks) lies within its edges."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    drawn = fig.get_tightbbox(renderer)  # in inches
    width, height = fig.get_size_inches()
    assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01, \
        (drawn, width, height)


@pytest.mark.parametrize("content, message", [
    (None, "no such file"), ("[{]", "not JSON (line 1"), ("{}", "non-empty JSON list"),
    ('[{"name": "x", "dtype": "fp32"}]', "record 1 has no ratio"),
    ('[{"name": "x", "dtype": "fp32", "ratio": 1}, 3]', "record 2 is not an object"),
    ('[{"name": "x", "dtype": "fp32", "ratio": -1}]', "ratio must be a positive number"),
    # hand-made files: each one line naming the file, the record and the key, never a traceback
    (b'\xff\xfe[\x00', "bench.json: UTF-16 or UTF-32 text (it starts with that byte-order mark)"),
    ('[{"name": "x", "dtype": "fp32", "ratio": Infinity}]', "record 1 (x): ratio must be a positive number"),
    ('[{"name": "x", "dtype": "fp32", "ratio": 1e308}]', "record 1 (x): ratio must be a positive number"),
    ('[{"name": "x", "dtype": "fp32", "ratio": true}]', "record 1 (x): ratio must be a positive number (finite, "
                                                        "at most 1e+09), got true"),
    ('[{"name": "x", "dtype": "fp32", "ratio": 1.5, "ceiling": Infinity}]',
     "record 1 (x): ceiling must be a positive number (finite, at most 1e+09) or null, got Infinity"),
    ('[{"name": "x", "dtype": {"a": 1}, "ratio": 1.5}]', 'record 1: dtype must be a non-empty string, got {"a": 1}'),
    ('[{"name": "x", "dtype": "fp32", "ratio": 1.5}, {"name": null, "dtype": "fp32", "ratio": 1.5}]',
     "record 2: name must be a non-empty string, got null"),
    ('[{"name": "x", "dtype": "fp32", "ratio": 1.5, "machine": ["a"]}]', "record 1 (x): machine must be a string"),
])
def test_bench_picture_refuses_bad_records_in_one_line(content, message, tmp_path, capsys):
    path = tmp_path / "bench.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert main(["visualize", "bench", str(path), "--out", str(tmp_path / "o")]) == 2
    assert message in one_error_line(capsys) and not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, message", [
    (["visualize", "attention", "--model", "no-such-model", "--text", "hi"], "unknown model 'no-such-model'"),
    (["visualize", "attention", "--model", "mini-bert", "--text", ""], "the text is empty"),
    (["visualize", "attention", "--model", "mini-bert", "--text", "hi", "--text-pair", " "], "the text pair is empty"),
    (["visualize", "attention", "--model", "mini-bert", "--text", "hi", "--max-length", "100"], "maximum of 64"),
    (["visualize", "attention", "--model", "mini-bert", "--text", "hi", "--layers", "7"], "out of range"),
    (["visualize", "attention", "--model", "mini-bert", "--text", "hi", "--deberta-components"],
     "needs a DeBERTa model"),
    (["visualize", "attention", "--model", "mini-bert", "--text", "hi", "--head", "1"], "add that flag"),
    (["visualize", "curves", "/no/such/run"], "no such run directory"),
    (["visualize", "distillation-temperature", "--logits", "1,x"], "comma-separated float"),
    (["visualize", "distillation-temperature", "--temperatures", "-1"], "positive"),
    (["visualize", "distillation-temperature", "--model", "mini-bert"], "needs --text"),
    (["visualize", "distillation-temperature", "--text", "a [MASK]"], "--text is read by a --model"),  # was ignored
    (["visualize", "attribution", "--model", "mini-bert", "--text", "hi"], "this model has no task head"),
    (["visualize", "distillation-temperature", "--model", "mini-bert", "--text", "a [MASK]", "--top-k", "1"],
     "--top-k must be from 2"),
    (["visualize", "distillation-temperature", "--model", "mini-bert", "--text", "a [MASK]", "--top-k", "40000"],
     "to 40 (more bars cannot be read"),  # (it drew 30,000 bars in 20 GB for minutes)
    (["visualize", "distillation-temperature", "--logits", ",".join(["1"] * 41)], "give at most 40 logits"),
    (["compare", "--presets", "mini-bert,bert-huge"], "unknown model 'bert-huge'"),
    (["compare", "--repeats", "0"], "at least 1"),
    (["compare", "--presets", ",,"], "--presets: no values in ',,'"),
])
def test_cli_bad_input_is_one_line(argv, message, tmp_path, capsys):
    assert main(argv + ["--out", str(tmp_path / "o")]) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())  # a folder's pictures untouched


def test_cli_out_naming_a_file_is_one_line_before_any_work(bert, tmp_path, capsys):
    """--out an existing file (or a path under one): one error line, the file untouched, for each
    command that writes pictures into a folder."""
    bert.save_pretrained(tmp_path / "ckpt")
    bench = tmp_path / "bench.json"
    bench.write_text("[]")
    taken = tmp_path / "taken.png"
    taken.write_bytes(b"not a folder")
    for argv in (["visualize", "attention", "--model", str(tmp_path / "ckpt"), "--text", SENTENCE],
                 ["visualize", "attribution", "--model", str(tmp_path / "ckpt"), "--text", SENTENCE],
                 ["visualize", "distillation-temperature"],
                 ["visualize", "curves", str(write_run(tmp_path / "run"))],
                 ["visualize", "bench", str(bench)],
                 ["compare", "--parameters-only"]):
        for out, problem in ((taken, "a file, not a folder"), (taken / "sub", "is a file, so no folder")):
            assert main(argv + ["--out", str(out)]) == 2, argv
            line = one_error_line(capsys)
            assert f"--out {out}: " in line and problem in line, argv
        assert taken.read_bytes() == b"not a folder"


@pytest.mark.parametrize("argv, phrase", [(["visualize"], "PICTURE"), (["visualize", "attention"], "explorer"),
                                          (["visualize", "distillation-temperature"], "temperature"),
                                          (["visualize", "curves"], "metrics.jsonl"), (["compare"], "meta device"),
                                          (["visualize", "bench"], "ceiling")])
def test_cli_help_explains_each_command(argv, phrase, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv + ["--help"])
    assert stop.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines anywhere
    assert phrase in out and ("--out" in out or argv == ["visualize"])


# ---- the explorer in a real browser ---------------------------------------------------------------

def chromium_or_skip(tmp_path):
    """A headless Chromium driven by Selenium through Debian's chromedriver (Selenium's own driver
    download would fail offline). Missing pieces skip the test, except under CI=true, where
    they fail it."""
    missing = []
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip install selenium, in the dev extra)")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        missing.append("chromium (apt-get install chromium)")
    if not CHROMEDRIVER.exists():
        missing.append(f"{CHROMEDRIVER} (apt-get install chromium-driver)")
    ci = os.environ.get("CI", "").lower() == "true"
    if missing:
        reason = "the real-browser test needs " + ", ".join(missing)
        if ci:
            pytest.fail(reason + "; under CI=true a missing browser is a failure, not a skip")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1300,1100", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    except Exception as e:  # a browser that is installed but cannot start
        reason = f"headless Chromium did not start: {type(e).__name__}: {str(e).strip().splitlines()[0]}"
        if ci:
            pytest.fail(reason)
        pytest.skip(reason)


def test_explorer_in_a_real_browser(minilm_dir, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = chromium_or_skip(tmp_path)
    try:
        model = bertkit.from_pretrained(minilm_dir)
        maps = attention_maps(model, SENTENCE, PAIR, description="all-MiniLM-L6-v2")
        page = write_explorer(maps, tmp_path / "attention.html")
        driver.get(page.resolve().as_uri())
        WebDriverWait(driver, 20).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
        drawing = lambda: driver.execute_script(  # noqa: E731
            "return document.getElementById('head-canvas').toDataURL();")
        ink = lambda canvas: driver.execute_script(  # noqa: E731  (pixels that are not white)
            "var c = document.getElementById(arguments[0]), d = c.getContext('2d')"
            ".getImageData(0, 0, c.width, c.height).data, n = 0;"
            "for (var i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 700) n++; return n;", canvas)

        start = drawing()
        assert ink("head-canvas") > 5_000
        head0 = driver.find_element(By.CSS_SELECTOR, '.head-toggle[data-head="0"]')
        head0.click()
        assert head0.get_attribute("aria-pressed") == "false"
        without_head0 = drawing()
        assert without_head0 != start, "toggling a head did not change the drawing"
        Select(driver.find_element(By.ID, "layer-select")).select_by_value("3")
        layer3 = drawing()
        assert layer3 != without_head0, "changing the layer did not change the drawing"
        Select(driver.find_element(By.ID, "from-filter")).select_by_value("B")
        assert drawing() != layer3, "the sentence filter did not change the drawing"
        Select(driver.find_element(By.ID, "from-filter")).select_by_value("all")
        head0.click()
        assert head0.get_attribute("aria-pressed") == "true" and drawing() not in (layer3, start)
        driver.save_screenshot(str(tmp_path / "head_view.png"))

        driver.find_element(By.ID, "tab-model").click()
        thumbs = driver.find_elements(By.CSS_SELECTOR, ".thumb")
        assert len(thumbs) == maps.num_layers * maps.num_heads == 72
        target = driver.find_element(By.CSS_SELECTOR, '.thumb[data-layer="2"][data-head="5"]')
        driver.execute_script("arguments[0].scrollIntoView();", target)
        target.click()
        assert driver.find_element(By.ID, "detail").is_displayed()
        assert driver.find_element(By.ID, "detail-title").text == "layer 2, head 5"
        assert ink("detail-canvas") > 10_000
        driver.save_screenshot(str(tmp_path / "model_view.png"))
        driver.find_element(By.ID, "detail-head-view").click()
        assert driver.find_element(By.ID, "head-view").is_displayed()
        assert Select(driver.find_element(By.ID, "layer-select")).first_selected_option.text == "layer 2"
        pressed = [b.get_attribute("aria-pressed") for b in driver.find_elements(By.CSS_SELECTOR, ".head-toggle")]
        assert pressed == ["true" if h == 5 else "false" for h in range(12)]
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        driver.quit()
    assert_picture(tmp_path / "head_view.png", 1000, 800)
    assert_picture(tmp_path / "model_view.png", 1000, 800)


# ---- token attributions (integrated gradients) ------------------------------------------------

@pytest.mark.parametrize("name", ["bert-base", "roberta-base", "albert-base", "distilbert-base", "electra-small",
                                  "deberta-base", "deberta-v3-base", "modernbert-base"])
def test_attributions_add_up_to_the_class_logit_minus_the_baselines(name, tokenizer):
    """Completeness (Sundararajan et al., 2017, sec. 3): the tokens' attributions sum to F(x) -
    F(baseline), up to the path sum's error, which shrinks with more steps; the special tokens,
    equal in input and baseline, get exactly zero."""
    from bertkit.viz.attribution import integrated_gradients

    model = tiny(name, tokenizer.vocab_size, num_labels=3)
    model = bertkit.Model(model.config, head="classification", tokenizer=tokenizer)
    randomize(model, seed=2)
    model.eval()
    encoded = encode(model, SENTENCE, PAIR)
    coarse, fine = (integrated_gradients(model, encoded, steps=s) for s in (4, 64))
    difference = fine.output - fine.baseline_output
    assert abs(difference) > 1e-3
    assert fine.gap <= 0.01 * abs(difference) + 1e-5 and fine.gap <= coarse.gap + 1e-6, (fine.gap, coarse.gap)
    special = [t in ("[CLS]", "[SEP]") for t in encoded.tokens]
    assert np.all(fine.scores[special] == 0.0) and np.any(fine.scores[~np.array(special)] != 0.0)
    with torch.no_grad():
        logits = model(encoded.ids, None, encoded.types).logits[0]
    assert fine.target == model.config.labels[int(logits.argmax())]
    assert fine.output == pytest.approx(float(logits.max()), abs=1e-5)  # the vectors go in as inputs_embeds
    other = integrated_gradients(model, encoded, target=model.config.labels[0], steps=8)
    assert other.target == model.config.labels[0]


@pytest.mark.parametrize("name", ["deberta-v3-base", "modernbert-base"])
def test_a_zero_padding_row_gets_the_mask_tokens_vector_as_baseline(name, tokenizer, tmp_path):
    """DeBERTa-v3 and ModernBERT normalize the word vector alone, and their padding row is zero
    (padding_idx): from a zero baseline every path point gives the input's output, and the shares
    missed F(x) - F(baseline) by far. The mask token's vector stands in, and completeness holds."""
    from bertkit.viz.attribution import integrated_gradients, write_attribution

    model = tiny(name, tokenizer.vocab_size, num_labels=1)  # a regression head: no probability
    model = bertkit.Model(model.config, head="classification", tokenizer=tokenizer)
    randomize(model, seed=4)
    with torch.no_grad():
        model.backbone.embeddings.word.weight[tokenizer.pad_token_id] = 0.0
    encoded = encode(model, SENTENCE, PAIR)
    result = integrated_gradients(model.eval(), encoded, steps=64)
    difference = result.output - result.baseline_output
    assert abs(difference) > 1e-3 and result.gap <= 0.02 * abs(difference), (result.gap, difference)
    assert result.baseline.startswith("the mask token's word vector")
    write_attribution(result, tmp_path)
    saved = json.loads((tmp_path / "attribution.json").read_text(), parse_constant=pytest.fail)  # strict JSON
    assert saved["probability"] is None and saved["baseline"] == result.baseline


def test_attribution_command_draws_and_writes_the_scores(bert, tokenizer, tmp_path, capsys):
    model = bertkit.Model(bert.config.replace(num_labels=2, label_names=("negative", "positive")),
                          head="classification", tokenizer=tokenizer)
    randomize(model, seed=3)
    model.save_pretrained(tmp_path / "clf")
    assert main(["visualize", "attribution", "--model", str(tmp_path / "clf"), "--text", SENTENCE,
                 "--target", "positive", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "'positive' (p = " in out and "attributions sum to" in out
    data = json.loads((tmp_path / "out" / "attribution.json").read_text())
    assert data["target"] == "positive" and len(data["scores"]) == len(data["tokens"])
    assert data["gap"] <= 0.01 * abs(data["output"] - data["baseline_output"]) + 1e-5
    assert_picture(tmp_path / "out" / "attribution.png", min_width=500)
    assert main(["visualize", "attribution", "--model", str(tmp_path / "clf"), "--text", SENTENCE,
                 "--target", "neutral", "--out", str(tmp_path / "out")]) == 2
    assert "'neutral' is not one of the model's labels (negative, positive)" in capsys.readouterr().err
    bert.save_pretrained(tmp_path / "bare")
    assert main(["visualize", "attribution", "--model", str(tmp_path / "bare"), "--text", SENTENCE]) == 2
    assert "attribution explains a sequence classifier" in capsys.readouterr().err


def test_a_dollar_in_a_run_folder_or_a_bench_file_is_drawn_as_it_is(tmp_path):
    # the loss curve every run draws at its end, and visualize bench's subtitle and labels, read it as math
    from bertkit.train.loop import plot_curves
    from bertkit.viz.bench import plot_bench

    run = tmp_path / "p$\\x$"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "split": "train", "loss": 5.0 - s}) + "\n"
                                               for s in (1, 2, 3)))
    plot_curves(run / "metrics.jsonl", tmp_path / "loss_curve.png")
    assert_picture(tmp_path / "loss_curve.png")
    record = {"name": "mini $\\y$", "dtype": "fp32", "ours": 2.0, "reference": 1.0, "unit": "ms", "ratio": 2.0,
              "device": "cuda $\\z$"}
    plot_bench([record], tmp_path / "bench.png", subtitle="box $\\w$")
    assert_picture(tmp_path / "bench.png", 300, 100)  # (one bar: a short picture)
