"""Shared blocks: the fused and explicit attention paths agree, masks follow one convention."""

import pytest
import torch

import bertkit
from bertkit.config import ACTIVATIONS, EncoderConfig
from bertkit.layers import SelfAttention, TransformerBlock, attention_mask_4d, key_padding_mask
from bertkit.layers.activations import activation

CFG = EncoderConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                    max_positions=16, attention_dropout=0.0, hidden_dropout=0.0)


class Biased(SelfAttention):
    """A score hook like DeBERTa's: both paths must add it the same way."""

    def score_bias(self, q, k, **inputs):
        return torch.matmul(q, q.transpose(-1, -2)) * 0.1  # (B, N, T, T)


@pytest.mark.parametrize("attn_cls", [SelfAttention, Biased])
@pytest.mark.parametrize("with_mask", [True, False])
def test_fused_and_explicit_attention_agree(attn_cls, with_mask):
    torch.manual_seed(0)
    attn = attn_cls(CFG).eval()
    x = torch.randn(3, 7, 32)
    ids = torch.ones(3, 7, dtype=torch.long)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5]) if with_mask else None
    m4 = attention_mask_4d(key_padding_mask(mask, ids))
    fused, none = attn(x, m4, need_weights=False)
    explicit, probs = attn(x, m4, need_weights=True)
    assert none is None and probs.shape == (3, 4, 7, 7)
    assert (fused - explicit).abs().max().item() <= 1e-5
    assert torch.allclose(probs.sum(-1), torch.ones(3, 4, 7))
    if with_mask:  # masked keys receive exactly zero probability
        assert probs[1, :, :, 4:].abs().max().item() == 0.0


def test_whole_model_paths_agree_and_attentions_shape():
    model = bertkit.build(CFG).eval()
    ids = torch.randint(1, 50, (2, 9))
    mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4])
    fast = model(ids, mask)
    slow = model(ids, mask, output_attentions=True)
    assert fast.attentions is None
    assert len(slow.attentions) == CFG.num_layers
    assert slow.attentions[0].shape == (2, CFG.num_heads, 9, 9)
    assert (fast.last_hidden_state - slow.last_hidden_state).abs().max().item() <= 1e-5


def test_int_and_bool_masks_give_the_same_output():
    model = bertkit.build(CFG).eval()
    ids = torch.randint(1, 50, (2, 6))
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    a = model(ids, mask).last_hidden_state
    b = model(ids, mask.bool()).last_hidden_state
    assert torch.equal(a, b)


def test_padding_does_not_change_real_tokens():
    model = bertkit.build(CFG).eval()
    ids = torch.randint(1, 50, (1, 5))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 5 + [0] * 3])
    alone = model(ids).last_hidden_state
    batched = model(padded, mask).last_hidden_state[:, :5]
    assert (alone - batched).abs().max().item() <= 1e-5


def test_an_all_padding_row_stays_finite():
    model = bertkit.build(CFG).eval()
    out = model(torch.zeros(2, 4, dtype=torch.long), torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]]))
    assert torch.isfinite(out.last_hidden_state).all()


def test_pre_ln_block_is_a_different_computation():
    torch.manual_seed(0)
    post = TransformerBlock(CFG).eval()
    pre = TransformerBlock(CFG.replace(norm_first=True)).eval()
    pre.load_state_dict(post.state_dict())
    x = torch.randn(2, 5, 32)
    y_post, _ = post(x)
    y_pre, _ = pre(x)
    assert not torch.allclose(y_post, y_pre)
    # Pre-LN keeps a residual stream that is not normalized at the block's output.
    assert y_post.mean(-1).abs().max() < 1e-4
    assert y_pre.mean(-1).abs().max() > 1e-3


def test_pre_ln_stack_ends_with_a_norm_and_trains():
    model = bertkit.build(CFG.replace(norm_first=True), head="mlm")
    assert model.backbone.encoder.final_norm is not None
    ids = torch.randint(1, 50, (2, 6))
    loss = model(ids).logits.logsumexp(-1).mean()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_every_activation_name_computes_what_transformers_computes(name):
    """A config's hidden_act means in bertkit what it means in transformers (its ACT2FN)."""
    from transformers.activations import ACT2FN

    x = torch.linspace(-12, 12, 2001, dtype=torch.float64)
    torch.testing.assert_close(activation(name)(x), ACT2FN[name](x), rtol=1e-12, atol=1e-12)
