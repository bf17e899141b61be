"""Execution paths give the same numbers: unpadded (default) against padded, fused against
explicit, for every preset's family (shrunk)."""

import math

import pytest
import torch

import bertkit
from bertkit import PRESETS  # the public name: importing it registers every family's presets
from bertkit.layers import FeedForward, activation, block
from bertkit.config import ACTIVATIONS
from bertkit.layers.activations import activation_backward_into, activation_in_place
from bertkit.models.deberta import EnhancedMaskDecoder

# One preset per family, its narrowest (the last one kept): the paths depend on the family, not
# the width, and two blocks of each large preset made this file take four minutes of the suite.
FAMILY_PRESETS = sorted({p.config.family: name for name, p in sorted(
    PRESETS.items(), key=lambda item: (-item[1].config.hidden_size, -item[1].config.intermediate_size))}.values())


def shrunk(name, **kw):
    config = PRESETS[name].config
    config = config.replace(num_layers=2, vocab_size=120, max_positions=40,
                            pad_token_id=min(config.pad_token_id, 119), **kw)
    if config.family == "deberta-v2":
        config = config.replace(conv_kernel_size=3, position_buckets=8)  # the conv layer sees neighbours
    if config.family == "modernbert":
        config = config.replace(local_attention=4)  # the local layer's window is shorter than the batch
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


class Logits(torch.nn.Module):
    """A model's logits alone: a trace or an export records tensors, not the output object."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(ids, mask).logits


def no_dropout(model):
    """Dropout off everywhere, so two paths can be compared in training mode."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


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
    model = no_dropout(shrunk("bert-base").train())
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


@pytest.mark.parametrize("kernel", ["matmuls", "sdpa", "by-length"])
@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_buckets_in_either_layout_match_padded_outputs_and_gradients(name, kernel, monkeypatch):
    """Several buckets, their heads laid out for batched matmuls (head-major), for SDPA
    (token-major), or token-major with the short buckets still on matmuls (the kernel is chosen
    per bucket length, the layout once per forward)."""
    from bertkit.layers import packing
    from bertkit.layers.attention import SelfAttention

    choose = {"matmuls": lambda q, keys, p: True, "sdpa": lambda q, keys, p: False,
              "by-length": lambda q, keys, p: keys <= 20}[kernel]
    monkeypatch.setattr(SelfAttention, "_matmuls", staticmethod(choose))
    monkeypatch.setattr(packing, "BUCKET_ALLOWANCE", 0)
    assert len(packing.Packing.from_mask(mixed_lengths(0)[1].bool()).buckets) >= 3
    assert_packed_matches_padded(no_dropout(shrunk(name).train()))


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_one_bucket_matches_padded_outputs_and_gradients(name, monkeypatch):
    """Every sequence in one bucket, padded to the longest: what CUDA runs where attention does
    work of its own per bucket (Encoder.bucket_work; test_cuda checks that choice there)."""
    from bertkit.layers import packing
    from bertkit.layers.packing import Packing

    made, real = [], Packing.from_mask.__func__
    monkeypatch.setattr(Packing, "from_mask", classmethod(lambda cls, *a: made.append(real(cls, *a)) or made[-1]))
    monkeypatch.setattr(packing, "BUCKET_ALLOWANCE", math.inf)
    assert_packed_matches_padded(no_dropout(shrunk(name).train()))
    assert made and all(len(p.buckets) == 1 for p in made)


def mixed_lengths(pad_id):
    lengths = [36, 30, 21, 9, 2, 17]  # RoBERTa counts positions from pad + 1: 38 fit
    g = torch.Generator().manual_seed(1)
    mask = (torch.arange(36)[None] < torch.tensor(lengths)[:, None]).long()
    return torch.randint(3, 120, mask.shape, generator=g).masked_fill(mask == 0, pad_id), mask


def assert_packed_matches_padded(model):
    """Logits at the real tokens and every gradient, unpadded path against padded, on mixed lengths."""
    ids, mask = mixed_lengths(model.config.pad_token_id)
    keys = mask.bool()
    results = []
    for unpad in (True, False):
        model.zero_grad()
        model.backbone.unpad = unpad
        logits = model(ids, mask).logits[keys]
        logits.logsumexp(-1).mean().backward()
        results.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (fast, fast_grads), (padded, padded_grads) = results
    assert (fast - padded).abs().max().item() <= 1e-4
    for n, grad in fast_grads.items():
        assert (grad - padded_grads[n]).abs().max().item() <= 1e-5, n


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "full-length"])
@pytest.mark.parametrize("name", FAMILY_PRESETS + ["pre-ln"])
def test_sparse_mlm_equals_the_dense_path_at_masked_positions(name, padded):
    """masked_positions: logits (K, V) and last_hidden_state (K, H) equal the dense outputs at
    those positions, and so do the gradients of a loss on them; the last block's feed-forward
    runs on the K rows only, unless a row is padding or every layer's states are asked for
    (then everything is computed and the rows picked). Without padding, plain attention also
    computes only the K queries (two sequences have none). "pre-ln": a BERT with pre-LN blocks."""
    model = no_dropout((shrunk("mini-bert", norm_first=True) if name == "pre-ln" else shrunk(name)).train())
    ids, mask = batch(model.config.pad_token_id)
    if not padded:
        mask = torch.ones_like(mask)
    chosen = torch.zeros_like(mask, dtype=torch.bool)
    chosen[0, [1, 5, 9]] = True
    chosen[2, 3] = True
    seen, queries = [], []
    last = model.backbone.encoder.layer_for(model.config.num_layers - 1)
    last.ffn.register_forward_hook(lambda m, args, out: seen.append(args[0].numel() // args[0].shape[-1]))
    last.attn.query.register_forward_hook(lambda m, args, out: queries.append(args[0].numel() // args[0].shape[-1]))

    def run(**kw):
        model.zero_grad()
        out = model(ids, mask, **kw)
        logits = out.logits if "masked_positions" in kw else out.logits[chosen]
        logits.logsumexp(-1).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        hidden = out.last_hidden_state if "masked_positions" in kw else out.last_hidden_state[chosen]
        return logits.detach(), hidden.detach(), grads

    dense = run()
    seen.clear(), queries.clear()
    sparse = run(masked_positions=chosen)
    emd = model.head.uses_hidden_states  # DeBERTa's enhanced mask decoder reads the full last layer
    assert seen[-1] == (int(mask.sum()) if emd else 4)  # ALBERT's shared block runs every layer
    if last.attn.plain_scores:  # (DeBERTa's query projection also projects its position embeddings)
        assert queries[-1] == (int(mask.sum()) if padded else 4)
    assert sparse[0].shape == (4, model.config.vocab_size) and sparse[1].shape == (4, model.config.hidden_size)
    assert (sparse[0] - dense[0]).abs().max().item() <= 1e-5
    assert (sparse[1] - dense[1]).abs().max().item() <= 1e-5
    assert sparse[2].keys() == dense[2].keys()
    for n, g in dense[2].items():
        assert (sparse[2][n] - g).abs().max().item() <= 1e-5, n
    padded_row = chosen.clone()
    padded_row[1, 8] = True  # row 1 has 4 real tokens
    with torch.no_grad():
        everything = model(ids, mask)
        seen.clear()
        with_padding = model(ids, mask, masked_positions=padded_row)
        assert seen[-1] == (int(mask.sum()) if padded or emd else 5)
        seen.clear()
        with_states = model(ids, mask, masked_positions=chosen, output_hidden_states=True)
        assert seen[-1] == int(mask.sum())
    real = mask.bool()[padded_row]  # (the pad among them: the head of a zero state; the dense path gives 0 there)
    assert (with_padding.logits[real] - everything.logits[padded_row][real]).abs().max().item() <= 1e-5
    assert (with_states.logits - dense[0]).abs().max().item() <= 1e-5
    assert (with_states.last_hidden_state - dense[1]).abs().max().item() <= 1e-5


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_the_dense_mlm_head_projects_real_tokens_only(name):
    """On the unpadded path the MLM logits at pads are 0 (no work there), the real tokens' equal
    the padded path's, and a .half() model's gradients stay finite: a pad's zero state through
    the head's LayerNorm (1 / sqrt(eps) overflows float16) made the head's gradients NaN."""
    model = shrunk(name).eval()
    ids, mask = batch(model.config.pad_token_id)
    pad = ~mask.bool()
    fast = model(ids, mask).logits
    model.backbone.unpad = False
    slow = model(ids, mask).logits
    model.backbone.unpad = True
    assert (fast[~pad] - slow[~pad]).abs().max().item() <= 1e-5
    if not isinstance(model.head, EnhancedMaskDecoder) or model.head.steps == 0:  # (EMD decodes padded states)
        assert fast[pad].abs().max().item() == 0 and slow[pad].abs().max().item() > 0
    half = model.half()
    logits = half(ids, mask).logits
    torch.nn.functional.cross_entropy(logits[~pad].float(), ids[~pad]).backward()
    broken = [n for n, p in half.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert broken == [] and half.head.norm.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("head", ["token-classification", "qa"])
def test_modernberts_per_token_heads_score_the_real_tokens_only(head):
    """ModernBERT's tagging and QA heads (dense, activation, LayerNorm per token) run on the real
    tokens of an unpadded batch, as the MLM head does: a .half() model with BERT's LayerNorm eps
    (1e-12) had NaN head gradients from the pads' zero rows."""
    name = next(n for n in FAMILY_PRESETS if PRESETS[n].config.family == "modernbert")
    torch.manual_seed(0)
    model = bertkit.build(shrunk(name).config.replace(layer_norm_eps=1e-12), head=head,
                          num_labels=3 if head == "token-classification" else None).eval()
    ids, mask = batch(model.config.pad_token_id)
    real = mask.bool()
    field = "logits" if head == "token-classification" else "start_logits"
    fast = getattr(model(ids, mask), field)
    model.backbone.unpad = False
    slow = getattr(model(ids, mask), field)
    model.backbone.unpad = True
    assert (fast[real] - slow[real]).abs().max().item() <= 1e-5 and fast[~real].abs().max().item() == 0
    half = model.half()
    getattr(half(ids, mask), field)[real].float().logsumexp(-1).sum().backward()
    # (the head's: the embeddings' LayerNorm runs before unpadding, on build()'s zero pad embedding)
    assert [n for n, p in half.head.named_parameters() if not torch.isfinite(p.grad).all()] == []


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_no_masked_positions_give_empty_outputs(name):
    """A batch with nothing masked (K = 0) gives (0, V) logits and (0, H) states, in training (a
    loss on them backpropagates) and in inference, with and without padding."""
    model = no_dropout(shrunk(name).train())
    ids, mask = batch(model.config.pad_token_id)
    none = torch.zeros_like(mask, dtype=torch.bool)
    for m in (mask, torch.ones_like(mask)):
        out = model(ids, m, masked_positions=none)
        assert out.logits.shape == (0, model.config.vocab_size)
        assert out.last_hidden_state.shape == (0, model.config.hidden_size)
        out.logits.sum().backward()
        with torch.no_grad():
            assert model(ids, m, masked_positions=none).logits.shape == (0, model.config.vocab_size)


def test_sparse_positions_need_a_vocabulary_head():
    model = bertkit.build(PRESETS["mini-bert"].config.replace(num_layers=1), head="classification")
    ids = torch.randint(1, 100, (1, 5))
    with pytest.raises(bertkit.BertkitError, match="masked-LM head"):
        model(ids, masked_positions=torch.ones(1, 5, dtype=torch.bool))
    # ELECTRA's "pretraining" head is the discriminator, unlike BERT's: the message says which it is
    electra = bertkit.build(PRESETS["electra-small"].config.replace(num_layers=1), head="pretraining")
    with pytest.raises(bertkit.BertkitError, match="its 'pretraining' head is a ReplacedTokenHead, which predicts no"):
        electra(ids, masked_positions=torch.ones(1, 5, dtype=torch.bool))


def test_sparse_mlm_with_the_pretraining_head_and_emd():
    """The pooler still reads each [CLS] when the last block computes only the masked rows."""
    from bertkit.models.deberta import DebertaConfig

    for model in (bertkit.build(PRESETS["mini-bert"].config.replace(num_layers=2), head="pretraining"),
                  bertkit.build(DebertaConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                                              intermediate_size=40, max_positions=16, position_buckets=8,
                                              enhanced_mask_decoder=True), head="mlm")):
        model.eval()
        ids = torch.randint(1, 100, (3, 9))
        chosen = torch.rand(3, 9, generator=torch.Generator().manual_seed(0)) < 0.3
        chosen[0, 0] = True  # a masked [CLS] is both a row and the pooler's input
        for mask in (None, (torch.arange(9)[None] < torch.tensor([[9], [5], [7]])).long()):
            picked = chosen if mask is None else chosen & mask.bool()
            with torch.no_grad():
                dense, sparse = model(ids, mask), model(ids, mask, masked_positions=picked)
            assert (sparse.logits - dense.logits[picked]).abs().max().item() <= 1e-5
            if dense.pair_logits is not None:
                assert (sparse.pair_logits - dense.pair_logits).abs().max().item() <= 1e-5


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
    # Attention layouts, one row per token or per token and head: each bucket's gather gives
    # its tokens as (b, L, N, D), token- or head-major, and the inverse brings every bucket's
    # slots, laid end to end, back to the tokens.
    N, D = 3, 2
    x = torch.randn(int(lengths.sum()), N * D, generator=g)
    for n in (1, N):
        layout, laid = packing.layout(n), []
        for b, gather in zip(packing.buckets, layout.gathers):
            m, L = b.rows.shape
            rows = x.view(-1, N * D // n).index_select(0, gather)
            split = rows.view(m, L, N, D) if n == 1 else rows.view(m, N, L, D).transpose(1, 2)
            assert torch.equal(split, x[b.rows].view(m, L, N, D))
            laid.append(rows)
        assert packing.slots == sum(b.rows.numel() for b in packing.buckets)
        assert torch.equal(torch.cat(laid).index_select(0, layout.inverse).view(x.shape), x)
    cu = packing.cumulative_lengths  # varlen attention's offsets: sequence i is tokens cu[i]:cu[i + 1]
    assert cu.dtype == torch.int32 and cu.tolist() == [0] + lengths.cumsum(0).tolist()
    assert (packing.index[cu[1:].long() - 1] // 200).tolist() == list(range(40))  # each run ends in its row
    same = Packing.from_mask(torch.ones(8, 30, dtype=torch.bool))
    assert len(same.buckets) == 1 and same.buckets[0].keys is None


@pytest.mark.parametrize("precision", ["fp32", "bf16-autocast", "bf16"])
@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_inference_reuses_sublayer_outputs_with_the_same_numbers(name, precision, monkeypatch):
    """Without autograd recording, the activation and the residual sums are written in place,
    every layer's feed-forward intermediate goes into one shared scratch buffer (block.py,
    feedforward.py, scratch.py), and so do the attention scores where attention runs as batched
    matmuls (bf16 on CPU), softmax in place: the numbers must equal those of the same forward
    with fresh tensors, every layer's hidden state included (none may be overwritten later); a
    recorded forward never writes in place, and under autocast no scratch is used (an out=
    matmul is not cast)."""
    from bertkit.layers import attention, feedforward

    # The scratch path serves what oneDNN's fused up-projection + activation does not (dense.py:
    # GeGLU, activations without a post-op, CUDA): here it serves every activation.
    monkeypatch.setattr(feedforward, "dense_act", lambda *a: None)
    model = shrunk(name)
    if precision == "bf16":
        model.to(torch.bfloat16)
    autocast = precision == "bf16-autocast"
    ids, mask = batch(model.config.pad_token_id)
    ffns = [m for m in model.modules() if isinstance(m, FeedForward)]
    calls, buffers, scores = [], [], []
    for ffn in ffns:
        ffn.act_in_place = lambda h, f=ffn.act_in_place: calls.append(1) or f(h)
    shared = FeedForward._buffer
    monkeypatch.setattr(FeedForward, "_buffer", lambda self, x: buffers.append(shared(self, x)) or buffers[-1])
    real_scratch = attention.scratch
    monkeypatch.setattr(attention, "scratch", lambda *a: scores.append(real_scratch(*a)) or scores[-1])
    assert model(ids, mask).logits.requires_grad and not calls and all(b is None for b in buffers + scores)
    buffers.clear(), scores.clear()
    with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        reused = model(ids, mask, output_hidden_states=True)
        assert len(calls) == len(buffers) == model.config.num_layers
        if autocast:
            assert buffers == [None] * model.config.num_layers and all(b is None for b in scores)
        else:  # one buffer for all layers: (real tokens, intermediate size)
            assert len({b.data_ptr() for b in buffers}) == 1
            assert buffers[0].shape == (int(mask.sum()), ffns[0].up.out_features)  # GeGLU: both halves
        if precision == "bf16":  # attention ran as batched matmuls, scores in scratch memory
            assert scores and all(b is not None for b in scores)
        monkeypatch.setattr(block, "residual", lambda stream, update: stream + update)
        monkeypatch.setattr(feedforward, "scratch", lambda *a: None)
        monkeypatch.setattr(attention, "scratch", lambda *a: None)
        for ffn in ffns:
            ffn.act_in_place = None
        fresh = model(ids, mask, output_hidden_states=True)
    for a, b in [(fresh.logits, reused.logits)] + list(zip(fresh.hidden_states, reused.hidden_states)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_cpu_dropout_keeps_the_distribution_and_its_gradient_uses_the_same_mask(p):
    """The cheap CPU mask (dropout.py): each element kept with probability 1 - p (a binomial
    count within 5 sigma over 2M elements), kept ones scaled by 1 / (1 - p), so the mean is kept;
    the gradient is the same mask times the same scale; seeded like any torch random op."""
    from bertkit.layers.dropout import Dropout, dropout

    x = torch.rand(2 ** 21).add_(0.5).requires_grad_()
    torch.manual_seed(3)
    y = dropout(x, p)
    kept = y != 0
    n = x.numel()
    assert abs(int(kept.sum()) - n * (1 - p)) <= 5 * (n * p * (1 - p)) ** 0.5
    scale = (y[kept] / x[kept]).detach()
    assert (scale * (1 - p) - 1).abs().max().item() <= 1e-4  # p is rounded to a multiple of 2^-16
    assert abs(y.mean().item() - x.mean().item()) <= 5e-3
    y.backward(torch.full_like(x, 2.0))
    assert torch.equal(x.grad != 0, kept) and (x.grad[kept] - 2 * scale).abs().max().item() <= 1e-5
    torch.manual_seed(3)
    assert torch.equal(dropout(x, p), y)  # same seed, same mask
    module = Dropout(p)  # an nn.Dropout: `.p` and train/eval switch it like torch's
    assert isinstance(module, torch.nn.Dropout) and module.eval()(x) is x
    assert dropout(x, 0.0) is x and dropout(x, p, training=False) is x
    assert dropout(x, 1.0).abs().max().item() == 0.0  # F.dropout's all-zero case


def test_attention_dropout_on_cpu_runs_batched_matmuls_with_the_cheap_mask(monkeypatch):
    """In training with attention dropout, CPU attention takes the batched-matmul path (the flash
    kernel has no dropout) and drops attention probabilities with dropout.py's mask."""
    from bertkit.layers import attention

    model = shrunk("bert-base").train()
    ids, mask = batch(0)
    seen = []
    real = attention.dropout
    monkeypatch.setattr(attention, "dropout", lambda x, p, *a: seen.append((x.dim(), p)) or real(x, p, *a))
    model(ids, mask).logits.sum().backward()
    assert seen == [(3, model.config.attention_dropout)] * model.config.num_layers  # (B * N, T, S) probs
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


# The activations with an in-place form (and, tanh aside, a gradient written into held memory).
IN_PLACE = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_in_place_activations_equal_the_plain_ones(name):
    x = torch.randn(4, 33)
    in_place = activation_in_place(name)
    if name not in IN_PLACE:  # composite formulas and rare names: the plain function runs
        assert in_place is None
        return
    y = x.clone()
    assert in_place(y).data_ptr() == y.data_ptr()
    assert torch.equal(y, activation(name)(x))


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_training_feed_forward_reusing_its_memory_equals_autograd(name):
    """A recorded feed-forward goes through _Recycling (it keeps only the activation's input
    and writes the gradients into the recomputed output) wherever the activation has a known
    backward: the output and every gradient equal plain autograd's, frozen weights get none,
    and a retained graph can be run backward again. Under autocast, autograd's."""
    config = PRESETS["mini-bert"].config.replace(hidden_act=name)
    torch.manual_seed(0)
    ffn = FeedForward(config)
    ffn.up.weight.requires_grad_(False)
    x = torch.randn(3, 5, config.hidden_size)
    g = torch.randn(3, 5, config.hidden_size)
    runs = {}
    for recycle in (True, False):
        ffn.recycle = recycle
        xr = x.clone().requires_grad_()
        y = ffn(xr)
        y.backward(g)
        runs[recycle] = type(y.grad_fn).__name__, y.detach(), xr.grad, [p.grad for p in ffn.parameters()]
        ffn.zero_grad(set_to_none=True)
    known = activation_backward_into(name) is not None
    assert known == (name in IN_PLACE and name != "tanh")
    assert ("_Recycling" in runs[True][0]) == known and "_Recycling" not in runs[False][0]
    torch.testing.assert_close(runs[True][1], runs[False][1], rtol=0, atol=0)
    torch.testing.assert_close(runs[True][2], runs[False][2])
    assert runs[True][3][0] is None and runs[False][3][0] is None  # the frozen up-projection
    for a, b in zip(runs[True][3][1:], runs[False][3][1:]):
        torch.testing.assert_close(a, b)
    if known:  # nothing saved was overwritten: a retained graph gives the same gradients twice
        ffn.recycle = True
        xr = x.clone().requires_grad_()
        y = ffn(xr)
        first = torch.autograd.grad(y, [xr, ffn.down.weight], g, retain_graph=True)
        second = torch.autograd.grad(y, [xr, ffn.down.weight], g)
        for a, b in zip(first, second):
            assert torch.equal(a, b)
        with torch.autocast("cpu", torch.bfloat16):
            assert "_Recycling" not in type(ffn(x.clone().requires_grad_()).grad_fn).__name__


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_tied_decoder_gradient_is_summed_in_place(name, monkeypatch):
    """The MLM decoder's own backward (heads._Decoder) gives autograd's gradients, and its weight
    gradient is one autograd can add the word embedding's into in place: no out-of-place (V, E)
    add in the step, where F.linear's transposed gradient costs one."""
    from torch.profiler import profile

    from bertkit.layers import heads

    model = no_dropout(shrunk(name).train())
    ids, mask = batch(model.config.pad_token_id)
    masked = mask.bool() & (torch.rand(ids.shape, generator=torch.Generator().manual_seed(1)) < 0.5)
    weight = model.head.decoder.weight
    tied = weight is model.backbone.embeddings.word.weight
    runs = {}
    for own in (True, False):
        monkeypatch.setattr(heads, "plain_eager", lambda x, own=own: own)
        model.zero_grad(set_to_none=True)
        with profile(record_shapes=True) as prof:
            logits = model(ids, mask, masked_positions=masked).logits
            torch.nn.functional.cross_entropy(logits, ids[masked]).backward()
        adds = [e for e in prof.events() if e.name == "aten::add" and e.input_shapes[:2] == [list(weight.shape)] * 2]
        runs[own] = logits.grad_fn.name(), adds, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert "_Decoder" in runs[True][0] and "_Decoder" not in runs[False][0]
    assert not runs[True][1]
    assert bool(runs[False][1]) == tied  # the check can see the copy it removes
    assert runs[True][2].keys() == runs[False][2].keys()
    for key, value in runs[True][2].items():
        torch.testing.assert_close(value, runs[False][2][key], msg=key)


def test_decoder_backward_is_differentiable_twice():
    torch.manual_seed(0)
    args = (torch.randn(3, 2, 4, dtype=torch.double, requires_grad=True),
            torch.randn(6, 4, dtype=torch.double, requires_grad=True),
            torch.randn(6, dtype=torch.double, requires_grad=True))
    from bertkit.layers.heads import _Decoder
    assert torch.autograd.gradcheck(_Decoder.apply, args)
    assert torch.autograd.gradgradcheck(_Decoder.apply, args)


@pytest.mark.parametrize("name", ["bert-base", "albert-base", "deberta-v3-base"])
def test_activation_checkpointing_gives_the_same_gradients(name):
    model = no_dropout(shrunk(name).train())
    ids, mask = batch(model.config.pad_token_id)
    grads = []
    for checkpointing in (False, True):
        model.zero_grad()
        if checkpointing:  # transformers' name for it
            model.gradient_checkpointing_enable()
        assert model.is_gradient_checkpointing == model.backbone.encoder.checkpointing == checkpointing
        model(ids, mask).logits[mask.bool()].logsumexp(-1).mean().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for n, g in grads[0].items():
        assert (g - grads[1][n]).abs().max().item() <= 1e-6, n


@pytest.mark.parametrize("name", FAMILY_PRESETS + ["deberta-v1"])
def test_fused_qkv_gives_the_same_outputs_and_gradients(name):
    if name == "deberta-v1":  # its key projection has no bias: the fused path must fall back
        from bertkit.models.deberta import DebertaV1Config
        torch.manual_seed(0)
        model = bertkit.build(DebertaV1Config(vocab_size=120, hidden_size=32, num_layers=2, num_heads=4,
                                              intermediate_size=40, max_positions=40), head="mlm")
    else:
        model = shrunk(name)
    no_dropout(model.train())
    ids, mask = batch(model.config.pad_token_id)
    keep = mask.bool()
    runs = []
    for fuse in (False, True):
        for m in model.modules():
            if hasattr(m, "fuse_qkv"):
                m.fuse_qkv = fuse
        model.zero_grad()
        logits = model(ids, mask).logits
        logits[keep].logsumexp(-1).mean().backward()
        runs.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (a, grads_a), (b, grads_b) = runs
    assert (a[keep] - b[keep]).abs().max().item() <= 1e-5
    assert grads_a.keys() == grads_b.keys()
    assert any(".query." in n for n in grads_b)  # the fused matmul still trains the separate weights
    for n in grads_a:
        assert (grads_a[n] - grads_b[n]).abs().max().item() <= 1e-5, n


def test_batched_matmul_attention_equals_the_explicit_path():
    from bertkit.layers.attention import SelfAttention

    attn = SelfAttention(PRESETS["mini-bert"].config.replace(hidden_size=32, num_heads=4))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, 7, 8, generator=g) for _ in range(3))
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 5:] = False
    bias = torch.randn(3, 4, 7, 7, generator=g)
    for m, b in [(None, None), (mask, None), (mask, bias), (None, bias)]:
        expected, _ = attn._explicit(q, k, v, m, b, 0.0)
        folded = b if m is None or b is None else b.masked_fill(~m, float("-inf"))
        got = attn._bmm(q, k, v, m if b is None else folded, 0.0)
        assert (got - expected).abs().max().item() <= 1e-5
    # and in bf16 on CPU, where `_fused` picks it, against the flash kernel
    qb, kb, vb = (t.bfloat16() for t in (q, k, v))
    flash = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=attn.scale)
    assert (attn._fused(qb, kb, vb, mask, None, 0.0).float() - flash.float()).abs().max().item() <= 2e-2


def test_varlen_plumbing_matches_the_buckets(monkeypatch):
    """CUDA's varlen flash kernel cannot run here; a per-sequence stand-in with its signature
    checks what bertkit feeds it (cumulative lengths, head views, scale) and reads back."""
    import torch.nn.functional as F

    from bertkit.layers import attention, packing

    calls = []

    def stand_in(q, k, v, cu_q, cu_k, max_q, max_k, scale):  # (total, N, D) each
        calls.append(q.shape)
        assert cu_q.dtype == torch.int32 and max_q == max_k == int((cu_q[1:] - cu_q[:-1]).max())
        out = torch.empty_like(q)
        for s, e in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
            seq = [t[s:e].transpose(0, 1) for t in (q, k, v)]  # (N, L, D)
            out[s:e] = F.scaled_dot_product_attention(*seq, scale=scale).transpose(0, 1)
        return out

    model = shrunk("bert-base")
    ids, mask = batch(0)
    with torch.no_grad():
        expected = model(ids, mask).last_hidden_state
        monkeypatch.setattr(attention, "varlen_attn", stand_in)
        monkeypatch.setattr(attention.SelfAttention, "_varlen_runs", lambda self, q, packing: True)
        # varlen attention needs only the cumulative lengths: no buckets are built for it
        monkeypatch.setattr(packing, "_buckets", lambda *a: pytest.fail("buckets built for varlen attention"))
        got = model(ids, mask).last_hidden_state
    keep = mask.bool()
    assert len(calls) == model.config.num_layers and calls[0][0] == int(mask.sum())
    assert (got[keep] - expected[keep]).abs().max().item() <= 1e-5


def _compile_case(name, train, freeze=False, masked=False):
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters["graph_break"].clear()
    model = shrunk(name)
    eager = shrunk(name)
    for m in (model, eager):
        no_dropout(m.train(train))
    model.compile(freeze=freeze)
    g = torch.Generator().manual_seed(0)
    graphs = []
    for i, (B, T) in enumerate([(4, 11), (2, 30), (3, 17), (5, 9), (3, 23)]):
        ids = torch.randint(3, 120, (B, T), generator=g)
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        mask = (torch.arange(T)[None] < lengths[:, None]).long()
        if i in (1, 4):
            mask[:] = 1  # full length: the padded path, its own graph
        keep = mask.bool()
        kw = {}
        if masked:  # an MLM step: the last block computes the masked rows only, K new each batch
            kw["masked_positions"] = keep & (torch.rand(B, T, generator=g) < 0.3)
            keep = torch.ones(int(kw["masked_positions"].sum()), dtype=torch.bool)
        with torch.set_grad_enabled(train), torch.inference_mode(freeze):
            got, expected = model(ids, mask, **kw).logits, eager(ids, mask, **kw).logits
        assert (got[keep] - expected[keep]).abs().max().item() <= 1e-5
        if train:
            got[keep].logsumexp(-1).mean().backward()
            expected[keep].logsumexp(-1).mean().backward()
            for (n, p), q in zip(model.named_parameters(), eager.parameters()):
                assert (p.grad - q.grad).abs().max().item() <= 1e-5, n
            model.zero_grad(), eager.zero_grad()
        graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    # new lengths and batch sizes after the first packed and the first full-length batch compile nothing
    assert graphs[0] > 0 and graphs[2:] == [graphs[1]] * 3
    # and the graph breaks are the planned ones (the data-dependent parts of attention run eager)
    breaks = torch._dynamo.utils.counters["graph_break"]
    assert all("torch.compiler.disable" in reason for reason in breaks), list(breaks)


# ALBERT: shared blocks in groups (11 s: behind the slow marker, as the compiled MLM step, 16 s)
@pytest.mark.parametrize("name", ["bert-base", pytest.param("albert-base", marks=pytest.mark.slow)])
def test_compiled_blocks_match_eager_without_recompiling_for_new_shapes(name):
    _compile_case(name, train=False)


@pytest.mark.slow
def test_compiled_masked_lm_step_matches_eager_without_recompiling():
    _compile_case("bert-base", train=True, masked=True)


def test_frozen_compile_matches_eager_and_refuses_training_mode():
    _compile_case("bert-base", train=False, freeze=True)
    with pytest.raises(bertkit.BertkitError, match="eval"):
        shrunk("bert-base").train().compile(freeze=True)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_a_model_on_the_meta_device_gives_every_output_shape_for_a_padded_batch(name):
    """Meta tensors have shapes, no values: the padded path runs (unpadding reads the mask's
    values; it failed on .item()), and every output has the shape a real batch gives it."""
    model = shrunk(name)
    ids, mask = batch(model.config.pad_token_id)
    kw = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        real = model(ids, mask, **kw)
        meta = model.to("meta")(ids.to("meta"), mask.to("meta"), **kw)
    assert meta.logits.is_meta and meta.logits.shape == real.logits.shape
    assert [h.shape for h in meta.hidden_states] == [h.shape for h in real.hidden_states]
    assert [a.shape for a in meta.attentions] == [a.shape for a in real.attentions]


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_traced_model_keeps_the_padded_path_for_any_mask_and_shape(name):
    """torch.jit.trace records one batch's control flow (unpadding's lengths, whether a mask is
    all True), so while it traces the model keeps the padded path: the trace (and the ONNX
    export built on it) gives eager's outputs for other masks and shapes."""
    model = shrunk(name)

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 120, (2, 16), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    with torch.no_grad():
        traced = torch.jit.trace(Logits(model), (ids, mask), check_trace=False)
        for B, T, cut in [(2, 16, 16), (3, 20, 7), (1, 9, 4)]:
            ids = torch.randint(3, 120, (B, T), generator=g)
            mask = torch.ones_like(ids)
            mask[0, cut:] = 0
            keep = mask.bool()
            got, want = traced(ids, mask), model(ids, mask).logits
            assert (got[keep] - want[keep]).abs().max().item() <= 1e-5, (B, T, cut)


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # vmap of torch's attention kernels
@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_torch_func_grad_and_per_sample_vmap_match_autograd(name):
    """Under torch.func transforms the hand-written kernels (autograd Functions without
    setup_context, out= writes, oneDNN calls) step aside: func.grad gives autograd's gradients,
    and vmap(grad) gives each sample's own."""
    from torch.func import functional_call, grad, vmap

    model = no_dropout(shrunk(name).train())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 120, (3, 10), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0

    def loss(params, ids, mask):  # over real tokens only: pad positions are not defined
        logits = functional_call(model, params, (ids, mask)).logits
        return (logits.square() * mask[..., None]).sum() / mask.sum()

    params = {k: v.detach() for k, v in model.named_parameters()}
    got = grad(loss)(params, ids, mask)
    loss(dict(model.named_parameters()), ids, mask).backward()
    for k, p in model.named_parameters():
        assert (got[k] - p.grad).abs().max().item() <= 1e-5 * max(1.0, p.grad.abs().max().item()), k
    per_sample = vmap(grad(lambda p, x, m: loss(p, x[None], m[None])), in_dims=(None, 0, 0))(params, ids, mask)
    alone = grad(loss)(params, ids[1:2], mask[1:2])  # the padded one
    for k in alone:
        assert (per_sample[k][1] - alone[k]).abs().max().item() <= 1e-5 * max(1.0, alone[k].abs().max().item()), k


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_double_backward_matches_torch_func(name):
    """create_graph=True through the hand-written backward passes (a gradient penalty, MAML,
    Hessian-vector products) gives what torch.func's plain ops give for the same second order
    gradient. Attention runs its explicit path (output_attentions=True): torch's CPU flash
    kernel, the default without dropout, has no second derivative."""
    from torch.func import functional_call, grad

    model = no_dropout(shrunk(name).train())
    ids = torch.randint(3, 120, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0

    def loss(params):
        logits = functional_call(model, params, (ids, mask), {"output_attentions": True}).logits
        return (logits.square() * mask[..., None]).sum() / mask.sum()

    def penalty(params):
        return sum(g.square().sum() for g in grad(loss)(params).values())

    params = {k: v.detach() for k, v in model.named_parameters()}
    want = grad(penalty)(params)
    named = dict(model.named_parameters())
    first = torch.autograd.grad(loss(named), list(named.values()), create_graph=True)
    sum(g.square().sum() for g in first).backward()
    # one scale for all: the key bias's true gradient is zero (softmax ignores a per-row shift),
    # so its entries are rounding noise of the others' size
    scale = max(1.0, max(w.abs().max().item() for w in want.values()))
    for k, p in named.items():
        assert (p.grad - want[k]).abs().max().item() <= 1e-5 * scale, k


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_whole_model_pickles_and_trains_after(name):
    """torch.save(model) (and process pools, which pickle) can hold every module, the fast
    path's kernels included: the copy gives the same logits and gradients."""
    import io

    model = no_dropout(shrunk(name).train())
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    copy = torch.load(buffer, weights_only=False)
    ids = torch.randint(3, 120, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    for side in (model, copy):
        side(ids, mask).logits[mask.bool()].square().mean().backward()
    assert torch.equal(model(ids, mask).logits, copy(ids, mask).logits)
    for (k, p), q in zip(model.named_parameters(), copy.parameters()):
        assert torch.equal(p.grad, q.grad), k


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_compiled_training_matches_eager_for_every_family(name):
    _compile_case(name, train=True)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_module_hooks_run_on_every_path_and_pruning_trains(name):
    """A hook on a projection (activation capture, Captum, torch.nn.utils.prune) runs whether the
    model trains or serves: the fast paths that read weights directly step aside for it. Pruning
    recomputes the weight in a pre-hook; a path that skipped it trained on a stale weight and
    failed on the second backward."""
    from torch.nn.utils import prune

    model = shrunk(name)
    ids, mask = batch(model.config.pad_token_id)
    ffn = model.backbone.encoder.layer_for(0).ffn
    attention = model.backbone.encoder.layer_for(0).attn
    calls = []
    watched = [m for m in (getattr(ffn, "up", None), getattr(ffn, "down", None), model.head.decoder,
                           getattr(attention, "query", None)) if isinstance(m, torch.nn.Linear)]
    for module in watched:
        module.register_forward_hook(lambda m, i, o: calls.append(m))
    for training, grad in ((True, True), (False, True), (False, False)):
        model.train(training)
        calls.clear()
        with torch.set_grad_enabled(grad):
            model(ids, mask).logits.sum()
        assert {id(m) for m in calls} == {id(m) for m in watched}, (training, grad)
    target = watched[0]
    prune.l1_unstructured(target, "weight", amount=0.5)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(3):  # each step recomputes weight = weight_orig * weight_mask in the hook
        optimizer.zero_grad()
        model(ids, mask).logits.float().logsumexp(-1).mean().backward()
        optimizer.step()
    assert target.weight_orig.grad is not None
    model.eval()
    with torch.no_grad():
        pruned = model(ids, mask).logits
        prune.remove(target, "weight")  # the masked weight made permanent: the same numbers, no hook
        assert torch.allclose(model(ids, mask).logits, pruned, atol=1e-5)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_what_a_hook_keeps_stays_as_it_saw_it_and_backward_hooks_fire(name):
    """Inference writes over tensors nothing else holds: the feed-forward intermediate into memory
    every layer shares, the activation into the up-projection's output, the residual sum into a
    sublayer's output. A hook may hold them: in a block a hook watches, nothing is written over
    (every layer's kept intermediate was the last layer's). Backward hooks on a projection fire
    (the hand-written kernels skipped the module call that runs them)."""
    model = shrunk(name)
    ids, mask = batch(model.config.pad_token_id)
    kept, seen = [], []

    def keep(tensor):
        kept.append(tensor)
        seen.append(tensor.clone())

    blocks = {id(b): b for b in map(model.backbone.encoder.layer_for, range(model.config.num_layers))}
    for layer in blocks.values():  # (ALBERT's layers share one)
        layer.ffn.up.register_forward_hook(lambda m, args, out: keep(out))
        layer.ffn.down.register_forward_pre_hook(lambda m, args: keep(args[0]))
        layer.attn.out_proj.register_forward_hook(lambda m, args, out: keep(out))
        layer.ffn.register_forward_hook(lambda m, args, out: keep(out))
    for grad in (False, True):
        kept.clear(), seen.clear()
        with torch.set_grad_enabled(grad):
            model(ids, mask)
        assert len(kept) == 4 * model.config.num_layers
        assert all(torch.equal(k, s) for k, s in zip(kept, seen)), grad
    fired = []
    first = model.backbone.encoder.layer_for(0)
    watched = [first.ffn.up, first.ffn.down, first.attn.out_proj, model.head.decoder]
    for module in watched:
        module.register_full_backward_hook(lambda m, g_in, g_out: fired.append(m))
    no_dropout(model.train())(ids, mask).logits.float().logsumexp(-1).mean().backward()
    assert {id(m) for m in fired} == {id(m) for m in watched}


class _LowRank(torch.nn.Linear):
    """A linear with a low-rank term added in its forward, as PEFT's LoRA layers are."""

    def __init__(self, base: torch.nn.Linear, rank: int = 2):
        super().__init__(base.in_features, base.out_features, bias=base.bias is not None)
        self.load_state_dict(base.state_dict())
        g = torch.Generator().manual_seed(base.out_features)
        self.a = torch.nn.Parameter(torch.randn(rank, base.in_features, generator=g) * 0.1)
        self.b = torch.nn.Parameter(torch.randn(base.out_features, rank, generator=g) * 0.1)

    def forward(self, x):
        return super().forward(x) + x @ self.a.t() @ self.b.t()

    def merged(self) -> torch.nn.Linear:
        plain = torch.nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        with torch.no_grad():
            plain.weight.copy_(self.weight + self.b @ self.a)
            if self.bias is not None:
                plain.bias.copy_(self.bias)
        return plain


@pytest.mark.parametrize("name", ["mini-bert", "roberta-large"])  # a tied decoder, an untied one
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")  # quantize_dynamic, deprecated in torch
def test_a_linear_subclass_is_called_on_every_path_and_quantized_models_run(name):
    """A subclass of nn.Linear (PEFT's LoRA, a quantized layer) adds to its forward: the fused
    Q/K/V projection (CUDA's default) and the MLM decoder read `.weight` instead and dropped the
    low-rank term. The model with the terms equals the one with them merged into the weights."""
    import copy

    model = shrunk(name)
    model.head.decoder.weight = torch.nn.Parameter(model.head.decoder.weight.detach().clone())  # untie: merge it alone
    first = model.backbone.encoder.layer_for(0)
    for part in ("query", "key", "value"):
        setattr(first.attn, part, _LowRank(getattr(first.attn, part)))
    model.head.decoder = _LowRank(model.head.decoder)
    first.attn.fuse_qkv = True  # the path CUDA takes by default
    merged = copy.deepcopy(model)
    merged_block = merged.backbone.encoder.layer_for(0)
    for part in ("query", "key", "value"):
        setattr(merged_block.attn, part, getattr(merged_block.attn, part).merged())
    merged.head.decoder = merged.head.decoder.merged()
    ids, mask = batch(model.config.pad_token_id)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            assert torch.allclose(model(ids, mask).logits, merged(ids, mask).logits, atol=1e-4), grad
    quantized = torch.ao.quantization.quantize_dynamic(shrunk(name), {torch.nn.Linear}, dtype=torch.qint8)
    with torch.no_grad():
        want, got = shrunk(name)(ids, mask).logits, quantized(ids, mask).logits
    assert (got - want).abs().max() < 0.1 * want.abs().max()


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_torch_export_records_the_whole_model_as_one_graph(name):
    """torch.export (and torch.compile(fullgraph=True)) record the padded path in one graph, as a
    trace does: unpadding branches on the mask's values."""

    model = shrunk(name)
    ids, mask = batch(model.config.pad_token_id)
    length = torch.export.Dim("length", min=2, max=model.backbone.embeddings.max_length)  # RoBERTa's: 2 fewer
    shapes = ({0: torch.export.Dim("batch"), 1: length},) * 2
    exported = torch.export.export(Logits(model), (ids, mask), dynamic_shapes=shapes).module()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        # a ModernBERT local layer runs 20 tokens in blocks of its window in eager, 11 whole:
        # the graph was tied to lengths up to 16 (the choice between the two)
        for ids, mask in (batch(model.config.pad_token_id), (torch.randint(3, 120, (3, 20), generator=g),
                                                             torch.ones(3, 20, dtype=torch.long))):
            keep = mask.bool()
            assert torch.allclose(exported(ids, mask)[keep], model(ids, mask).logits[keep], atol=1e-5)


@pytest.mark.parametrize("name", [n if n in ("mini-bert", "modernbert-large")  # the feed-forward kinds: plain, GLU
                                  else pytest.param(n, marks=pytest.mark.slow) for n in FAMILY_PRESETS])
def test_onnx_export_under_no_grad_runs_in_onnxruntime_for_any_mask_and_shape(name, tmp_path):
    """torch.onnx.export(dynamo=False) records a jit trace: under no_grad the inference kernels
    wrote the feed-forward's matmul into scratch memory (addmm(out=)), which ONNX has no form of,
    and the export failed."""
    import onnxruntime

    model = shrunk(name)

    ids, mask = batch(model.config.pad_token_id)
    axes = {0: "batch", 1: "length"}
    with torch.no_grad():
        torch.onnx.export(Logits(model).eval(), (ids, mask), tmp_path / "m.onnx", dynamo=False,
                          input_names=["ids", "mask"], output_names=["logits"],
                          dynamic_axes={n: axes for n in ("ids", "mask", "logits")})
    session = onnxruntime.InferenceSession(tmp_path / "m.onnx", providers=["CPUExecutionProvider"])
    g = torch.Generator().manual_seed(1)
    for ids, mask in (batch(model.config.pad_token_id, left=True), (torch.randint(3, 120, (2, 20), generator=g),
                                                                    torch.ones(2, 20, dtype=torch.long))):
        with torch.no_grad():
            want = model(ids, mask).logits
        got = torch.from_numpy(session.run(None, {"ids": ids.numpy(), "mask": mask.numpy()})[0])
        keep = mask.bool()
        assert (got[keep] - want[keep]).abs().max().item() <= 1e-4



@pytest.mark.parametrize("name", ["bert-base", "roberta-base", "modernbert-base"])  # the three kinds of head
def test_heads_whose_scores_are_compared_run_in_fp32_under_bf16_autocast(name):
    # bf16 keeps about 3 digits: close choices' scores rounded to a tie, and argmax took the first
    config = shrunk(name).config.replace(hidden_size=64, intermediate_size=128, num_heads=4, num_labels=3)
    ids, mask = batch(config.pad_token_id)
    for head in ("classification", "token-classification", "qa", "multiple-choice", "mlm"):
        torch.manual_seed(0)
        model = bertkit.build(config, head=head).eval()
        inputs = (ids[None], mask[None]) if head == "multiple-choice" else (ids, mask)  # one context's choices
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
            out = model(*inputs)
        scores = [s for s in (out.logits, out.start_logits, out.end_logits) if s is not None]
        if head == "mlm":  # the vocabulary projection stays in bf16: it is the costly one
            assert scores[0].dtype == torch.bfloat16
            continue
        assert scores and all(s.dtype == torch.float32 for s in scores), head
        assert any(not torch.equal(s, s.bfloat16().float()) for s in scores), head  # not bf16 values in fp32
        # a model cast to half precision runs its head as autocast does: fp32 states met half weights (an error)
        for dtype in (torch.bfloat16, torch.float16):
            half = bertkit.build(config, head=head).eval().to(dtype)
            with torch.no_grad(), torch.autocast("cpu", dtype):
                out = half(*inputs)
            assert all(torch.isfinite(s).all() for s in (out.logits, out.start_logits, out.end_logits)
                       if s is not None), (head, dtype)
