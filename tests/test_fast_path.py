"""Execution paths give the same numbers: unpadded (default) against padded, fused against
explicit, for every preset's family (shrunk)."""

import pytest
import torch

import bertkit
from bertkit.config import PRESETS

FAMILY_PRESETS = sorted({p.config.family: name for name, p in PRESETS.items()}.values())


def shrunk(name, **kw):
    config = PRESETS[name].config.replace(num_layers=2, vocab_size=120, max_positions=40, **kw)
    if config.family == "deberta-v2":
        config = config.replace(conv_kernel_size=3, position_buckets=8)  # the conv layer sees neighbours
    torch.manual_seed(0)
    return bertkit.build(config, head="mlm").eval()


def batch(pad_id, left=False):
    g = torch.Generator().manual_seed(0)
    lengths = [11, 4, 7, 1]
    ids = torch.randint(3, 120, (4, 11), generator=g)
    mask = (torch.arange(11)[None] < torch.tensor(lengths)[:, None]).long()
    if left:
        mask = mask.flip(1)
    return ids.masked_fill(mask == 0, pad_id), mask


@pytest.mark.parametrize("left", [False, True], ids=["right-pad", "left-pad"])
@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_unpadded_path_equals_padded_path(name, left):
    model = shrunk(name)
    ids, mask = batch(model.config.pad_token_id, left)
    with torch.no_grad():
        fast = model(ids, mask, output_hidden_states=True)
        model.backbone.unpad = False
        padded = model(ids, mask, output_hidden_states=True)
        explicit = model(ids, mask, output_attentions=True)
    keep = mask.bool()
    for a, b in [(fast.last_hidden_state, padded.last_hidden_state), (fast.logits, padded.logits),
                 (fast.logits, explicit.logits)] + list(zip(fast.hidden_states, padded.hidden_states)):
        assert (a[keep] - b[keep]).abs().max().item() <= 1e-4
    # Unpadded, padding positions hold zeros.
    assert fast.last_hidden_state[~keep].abs().max().item() == 0.0


def test_unpadded_attention_maps_come_from_the_explicit_path():
    model = shrunk("bert-base")
    ids, mask = batch(0)
    with torch.no_grad():
        out = model(ids, mask, output_attentions=True)
    assert out.attentions[0].shape == (4, model.config.num_heads, 11, 11)
    assert out.attentions[0][1, :, :, 4:].abs().max().item() == 0.0


def test_unpadded_training_step_matches_padded_gradients():
    torch.manual_seed(0)
    model = shrunk("bert-base").train()  # training mode, with dropout switched off to compare
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    ids, mask = batch(0)
    keep = mask.bool()
    grads = []
    for unpad in (True, False):
        model.zero_grad()
        model.backbone.unpad = unpad
        model(ids, mask).logits[keep].logsumexp(-1).mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    for name, g in grads[0].items():
        assert (g - grads[1][name]).abs().max().item() <= 1e-5, name


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_sparse_mlm_logits_equal_the_dense_ones_at_masked_positions(name):
    model = shrunk(name)
    ids, mask = batch(model.config.pad_token_id)
    chosen = torch.zeros_like(mask, dtype=torch.bool)
    chosen[0, [1, 5, 9]] = True
    chosen[2, 3] = True
    with torch.no_grad():
        dense = model(ids, mask).logits
        sparse = model(ids, mask, masked_positions=chosen).logits
    assert sparse.shape == (4, model.config.vocab_size)
    assert (sparse - dense[chosen]).abs().max().item() <= 1e-5


def test_sparse_positions_need_a_vocabulary_head():
    model = bertkit.build(PRESETS["mini-bert"].config.replace(num_layers=1), head="classification")
    ids = torch.randint(1, 100, (1, 5))
    with pytest.raises(bertkit.BertkitError, match="masked-LM head"):
        model(ids, masked_positions=torch.ones(1, 5, dtype=torch.bool))


def test_sparse_mlm_with_the_pretraining_head_and_emd():
    from bertkit.models.deberta import DebertaConfig

    for model in (bertkit.build(PRESETS["mini-bert"].config.replace(num_layers=2), head="pretraining"),
                  bertkit.build(DebertaConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                                              intermediate_size=40, max_positions=16, position_buckets=8,
                                              enhanced_mask_decoder=True), head="mlm")):
        model.eval()
        ids = torch.randint(1, 100, (2, 9))
        chosen = torch.rand(2, 9, generator=torch.Generator().manual_seed(0)) < 0.3
        with torch.no_grad():
            dense, sparse = model(ids), model(ids, masked_positions=chosen)
        assert (sparse.logits - dense.logits[chosen]).abs().max().item() <= 1e-5


def test_buckets_cover_every_token_once_and_bound_the_padding():
    from bertkit.layers.packing import BUCKET_ALLOWANCE, BUCKET_SLACK, Packing

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 200, (40,), generator=g)
    keys = torch.arange(200)[None] < lengths[:, None]
    packing = Packing.from_mask(keys)
    covered = torch.cat([b.tokens for b in packing.buckets])
    assert sorted(covered.tolist()) == list(range(int(lengths.sum())))
    assert 1 < len(packing.buckets) < 40
    for b in packing.buckets:
        n, L = b.rows.shape
        real_lengths = b.real.div(L, rounding_mode="floor").bincount(minlength=n)
        assert n * L * L <= BUCKET_SLACK * (real_lengths ** 2).sum().item() + BUCKET_ALLOWANCE
    same = Packing.from_mask(torch.ones(8, 30, dtype=torch.bool))
    assert len(same.buckets) == 1 and same.buckets[0].keys is None


@pytest.mark.parametrize("name", ["bert-base", "albert-base", "deberta-v3-base"])
def test_activation_checkpointing_gives_the_same_gradients(name):
    model = shrunk(name).train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    ids, mask = batch(model.config.pad_token_id)
    grads = []
    for checkpointing in (False, True):
        model.zero_grad()
        model.backbone.encoder.checkpointing = checkpointing
        model(ids, mask).logits[mask.bool()].logsumexp(-1).mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for n, g in grads[0].items():
        assert (g - grads[1][n]).abs().max().item() <= 1e-6, n
