"""DeBERTa-v3 replaced-token detection with gradient-disentangled embedding sharing (GDES, He et
al., 2021, sec. 4): where each loss's gradient goes, learning on real text (movie reviews, the
MiniLM vocabulary), what a run saves and who can load it, and bit-exact resumption."""

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file

import bertkit
from bertkit.models.deberta import V3_PRESETS
from bertkit.models.electra import ReplacedTokenHead
from bertkit.objectives import ReplacedTokenDetection, build_objective
from bertkit.objectives.gdes import GradientDisentangledEmbedding
from bertkit.train import Trainer
from conftest import max_diff_on_real
from test_train import batches_from, interrupted_at, settings

TINY = dict(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_positions=64, position_buckets=16)
# The v3 presets have no absolute positions and no token types; a config may add both, and GDES
# then shares those tables too.
VARIANTS = {"v3": {}, "absolute-positions-and-types": dict(position_biased_input=True, type_vocab_size=2)}


def tiny_pair(tokenizer, **kw):
    return build_objective("rtd", "deberta-v3-xsmall", vocab_size=tokenizer.vocab_size, **{**TINY, **kw})


def gdes_tables(objective):
    """(name, generator's nn.Embedding, discriminator's GDES module) for every shared table."""
    g, d = objective.generator.backbone.embeddings, objective.discriminator.backbone.embeddings
    return [(name, getattr(g, name), getattr(d, name)) for name in ("word", "position", "token_type")
            if getattr(d, name) is not None]


def merged(objective, name="word"):
    g, d = objective.generator.backbone.embeddings, objective.discriminator.backbone.embeddings
    return getattr(g, name).weight.detach() + getattr(d, name).delta.detach()


@pytest.mark.parametrize("name", V3_PRESETS)
def test_every_v3_preset_builds_a_pair_of_equal_width_and_half_depth(name):
    with torch.device("meta"):  # full size, no memory
        objective = build_objective("rtd", name)
    gen, disc = objective.generator, objective.discriminator
    preset = bertkit.PRESETS[name].config
    assert disc.config == preset and isinstance(disc.head, ReplacedTokenHead)
    assert gen.config == preset.replace(num_layers=preset.num_layers // 2) and gen.head_kind == "mlm"
    word = disc.backbone.embeddings.word
    assert isinstance(word, GradientDisentangledEmbedding) and word.shared is gen.backbone.embeddings.word
    assert gen.head.decoder.weight is gen.backbone.embeddings.word.weight  # the MLM head reads E_G too
    # E_G is the generator's parameter only: the discriminator holds E_Delta, not a second E_G
    assert all(p is not gen.backbone.embeddings.word.weight for p in disc.parameters())


@pytest.mark.parametrize("variant", VARIANTS)
def test_delta_starts_at_zero_so_the_discriminator_starts_with_the_generator_embeddings(variant, tokenizer):
    torch.manual_seed(0)
    objective = tiny_pair(tokenizer, **VARIANTS[variant]).eval()
    tables = gdes_tables(objective)
    assert [name for name, _, _ in tables] == (["word"] if variant == "v3" else ["word", "position", "token_type"])
    for name, theirs, ours in tables:
        assert not ours.delta.any(), name
        assert torch.equal(ours.weight, theirs.weight), name
    ids = tokenizer(["a quiet, patient film that earns its ending"])["input_ids"]
    with torch.no_grad():  # same tables and (freshly initialized) LayerNorms: the same input vectors
        assert torch.equal(objective.discriminator.backbone.embeddings(ids),
                           objective.generator.backbone.embeddings(ids))


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_loss_reaches_only_its_own_embeddings(variant, reviews, tokenizer):
    torch.manual_seed(0)
    objective = tiny_pair(tokenizer, **VARIANTS[variant])
    batch_at, _ = batches_from(reviews, tokenizer)
    batch = batch_at(0)
    tables = gdes_tables(objective)

    def grads(loss_of):
        objective.zero_grad(set_to_none=True)
        torch.manual_seed(1)  # the same generator samples every time
        loss_of(objective.terms(batch)).backward()
        return ({name: theirs.weight.grad for name, theirs, _ in tables},
                {name: ours.delta.grad for name, _, ours in tables})

    def zero(grad):
        return grad is None or not grad.any()

    # L_RTD: E_Delta learns, E_G (and the whole generator) does not
    e_g, delta = grads(lambda t: t.rtd_loss)
    for name, _, _ in tables:
        assert zero(e_g[name]) and not zero(delta[name]), name
    assert all(zero(p.grad) for p in objective.generator.parameters())
    rtd_delta = delta

    # L_MLM: E_G learns, E_Delta does not
    e_g, delta = grads(lambda t: t.mlm_loss)
    assert not zero(e_g["word"])
    assert all(zero(delta[name]) for name, _, _ in tables)
    mlm_word = e_g["word"]

    # The objective's loss, L_MLM + 50 L_RTD: E_G gets exactly MLM's gradient, E_Delta 50 x RTD's
    e_g, delta = grads(lambda t: t.mlm_loss + objective.weight * t.rtd_loss)
    torch.testing.assert_close(e_g["word"], mlm_word, rtol=1e-5, atol=0)
    for name, _, _ in tables:
        torch.testing.assert_close(delta[name], objective.weight * rtd_delta[name], rtol=1e-4, atol=1e-9)


def train(objective, batch_at, out, **kw):
    trainer = Trainer(objective, batch_at, settings(**kw), out, eval_batches=[batch_at(10_000)])
    trainer.fit()
    return trainer


def test_loss_falls_on_real_text_and_the_metrics_match_electras(reviews, tokenizer, tmp_path):
    torch.manual_seed(0)
    objective = tiny_pair(tokenizer)
    e_g_before = objective.generator.backbone.embeddings.word.weight.detach().clone()
    batch_at, _ = batches_from(reviews, tokenizer)
    train(objective, batch_at, tmp_path / "run", steps=40)
    log = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in log if r["split"] == "train"]
    assert len(rows) == 40
    for key in ("loss", "mlm_loss", "mlm_accuracy", "rtd_loss", "rtd_accuracy", "replaced_fraction"):
        assert all(key in r for r in rows), key
    assert all(0.0 <= r[k] <= 1.0 for r in rows for k in ("mlm_accuracy", "rtd_accuracy", "replaced_fraction"))

    def mean(key, part):
        return sum(r[key] for r in part) / len(part)

    first, last = rows[:5], rows[-5:]
    assert mean("loss", last) < mean("loss", first) - 0.5  # nats: far beyond step-to-step noise
    assert mean("mlm_loss", last) < mean("mlm_loss", first) - 0.5  # the generator learns (E_G by MLM)
    assert mean("rtd_loss", last) < mean("rtd_loss", first) - 0.05  # the discriminator learns (BCE)
    assert objective.discriminator.backbone.embeddings.word.delta.abs().max() > 0  # E_Delta was trained
    assert not torch.equal(objective.generator.backbone.embeddings.word.weight, e_g_before)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_saved_root_is_the_merged_discriminator_and_loads_in_transformers(variant, reviews, tokenizer, tmp_path):
    torch.manual_seed(0)
    objective = tiny_pair(tokenizer, **VARIANTS[variant])
    batch_at, _ = batches_from(reviews, tokenizer)
    train(objective, batch_at, tmp_path / "run", steps=3)  # E_G and E_Delta both moved
    objective.eval()
    root = tmp_path / "run"
    gen, disc = objective.generator, objective.discriminator
    tables = gdes_tables(objective)
    assert all(ours.delta.abs().max() > 0 for _, _, ours in tables)

    # the file: E_G + E_Delta as the table, E_Delta exactly beside it, the RTD head
    saved = load_file(root / "model.safetensors")
    hf_table = {"word": "word_embeddings", "position": "position_embeddings", "token_type": "token_type_embeddings"}
    for name, _, ours in tables:
        assert torch.equal(saved[f"deberta.embeddings.{hf_table[name]}.weight"], merged(objective, name)), name
        assert torch.equal(saved[f"deberta.embeddings.{hf_table[name]}.gdes_delta"], ours.delta.detach()), name
    assert json.loads((root / "config.json").read_text())["architectures"] == ["DebertaV2ForPreTraining"]

    batch = batch_at(1)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    types = batch.get("token_type_ids") if variant != "v3" else None
    with torch.no_grad():
        ours_out = disc(ids, mask, types)

        # bertkit: a plain DeBERTa-v3 discriminator with the merged table, the same logits
        loaded = bertkit.from_pretrained(root)
        assert loaded.head_kind == "pretraining" and not isinstance(loaded.backbone.embeddings.word,
                                                                    GradientDisentangledEmbedding)
        assert torch.equal(loaded.backbone.embeddings.word.weight, merged(objective))
        theirs = loaded(ids, mask, types)
        assert max_diff_on_real(theirs.logits, ours_out.logits, mask) <= 1e-6

        # transformers: the encoder, same outputs; its embedding is E_G + E_Delta
        for cls in (transformers.AutoModel, transformers.DebertaV2Model):
            hf = cls.from_pretrained(root).eval()
            assert type(hf).__name__ == "DebertaV2Model"
            assert torch.equal(hf.embeddings.word_embeddings.weight, merged(objective))
            kw = {"token_type_ids": types} if types is not None else {}
            hidden = hf(input_ids=ids, attention_mask=mask, **kw).last_hidden_state
            assert max_diff_on_real(hidden, ours_out.last_hidden_state, mask) <= 1e-4

        # the generator: a DeBERTa-v2 masked LM holding E_G
        hf_gen = transformers.DebertaV2ForMaskedLM.from_pretrained(root / "generator").eval()
        assert torch.equal(hf_gen.deberta.embeddings.word_embeddings.weight, gen.backbone.embeddings.word.weight)
        kw = {"token_type_ids": types} if types is not None else {}
        diff = max_diff_on_real(hf_gen(input_ids=ids, attention_mask=mask, **kw).logits,
                                gen(ids, mask, types).logits, mask)
        assert diff <= 1e-4
        assert bertkit.from_pretrained(root / "generator").head_kind == "mlm"


def test_a_resumed_run_equals_an_uninterrupted_one_bit_for_bit(reviews, tokenizer, tmp_path):
    batch_at, _ = batches_from(reviews, tokenizer)

    def run(out, data, resume=False):
        torch.manual_seed(0)
        objective = tiny_pair(tokenizer, hidden_dropout=0.1, attention_dropout=0.1)  # dropout: RNG in play
        trainer = Trainer(objective, data, settings(steps=10, save_every=3, accumulation=2), out,
                          eval_batches=[batch_at(100)])
        if resume:
            assert trainer.resume()
            assert trainer.step == 6
            delta = objective.discriminator.backbone.embeddings.word.delta
            assert delta.abs().max() > 0  # E_Delta came back from the checkpoint, not from zero
        trainer.fit()
        return objective, trainer

    full, full_trainer = run(tmp_path / "full", batch_at)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut", interrupted_at(batch_at, 7))  # dies in step 8; its newest checkpoint is step 6
    resumed, resumed_trainer = run(tmp_path / "cut", batch_at, resume=True)

    # every parameter of both models (E_G in the generator, E_Delta and the RTD head in the
    # discriminator), the merged table, and the optimizer's moments
    for part in ("generator", "discriminator"):
        a, b = getattr(full, part).state_dict(), getattr(resumed, part).state_dict()
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), f"{part}.{name}"
    assert "backbone.embeddings.word.delta" in full.discriminator.state_dict()
    assert torch.equal(merged(full), merged(resumed))
    a, b = full_trainer.optimizer.state_dict()["state"], resumed_trainer.optimizer.state_dict()["state"]
    assert a.keys() == b.keys()
    for index in a:
        for key in a[index]:
            assert torch.equal(torch.as_tensor(a[index][key]), torch.as_tensor(b[index][key])), (index, key)
    for name in ("model.safetensors", "generator/model.safetensors"):
        x, y = load_file(tmp_path / "full" / name), load_file(tmp_path / "cut" / name)
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), name


@pytest.mark.parametrize("name", ["electra-small", "electra-base", "electra-large"])
def test_an_electra_generator_keeps_its_presets_fraction_of_an_overridden_width(name):
    # Without overrides the pair is the two presets; a narrower discriminator (a small test run,
    # --override hidden_size=...) keeps a generator that fraction of its width, with its head
    # size, not one as wide as itself (Clark et al., 2020, sec. 3.2: 1/4 to 1/2 works best).
    from bertkit.models.electra import GENERATOR_FOR

    with torch.device("meta"):
        preset = build_objective("rtd", name)
        narrow = build_objective("rtd", name, hidden_size=384, num_heads=6, intermediate_size=1536, num_layers=2)
    assert preset.generator.config == bertkit.PRESETS[GENERATOR_FOR[name]].config
    assert preset.discriminator.config == bertkit.PRESETS[name].config
    full, small = bertkit.PRESETS[name].config, bertkit.PRESETS[GENERATOR_FOR[name]].config
    g, d = narrow.generator.config, narrow.discriminator.config
    assert (d.hidden_size, d.num_heads, g.num_layers) == (384, 6, 2)
    assert g.hidden_size / d.hidden_size == pytest.approx(small.hidden_size / full.hidden_size, abs=0.1)
    assert g.hidden_size % g.num_heads == 0 and g.intermediate_size == 4 * g.hidden_size
    with torch.device("meta"):  # only the heads overridden: the same width, so the same generator width
        heads = build_objective("rtd", name, num_heads=4, num_layers=2).generator.config
    assert heads.hidden_size == round(full.hidden_size * small.hidden_size / full.hidden_size / heads.num_heads) \
        * heads.num_heads


def test_rtd_fits_electra_and_deberta_v3_presets_only():
    small = dict(TINY, vocab_size=200)
    electra = build_objective("rtd", "electra-small", **{k: v for k, v in small.items() if k != "position_buckets"})
    assert electra.generator.backbone.embeddings is electra.discriminator.backbone.embeddings  # ELECTRA: one module
    for preset in ("bert-base", "roberta-base", "deberta-base", "mini-bert"):
        with pytest.raises(bertkit.BertkitError, match="rtd trains an ELECTRA pair or a DeBERTa-v3 pair") as e:
            build_objective("rtd", preset)
        assert "electra-small" in str(e.value) and all(name in str(e.value) for name in V3_PRESETS)
        assert "\n" not in str(e.value)
    mlm_only = bertkit.build("deberta-v3-xsmall", head="mlm", **small)
    with pytest.raises(bertkit.BertkitError, match="replaced-token head"):
        ReplacedTokenDetection(bertkit.build("deberta-v3-xsmall", head="mlm", **small), mlm_only)
