"""ModernBERT (models/modern.py) beyond the shared parity tests: rotary positions under left
padding, the local layers' window in the attention maps and by blocks on long rows, the training
gradients, both config layouts transformers has written, what bertkit refuses to load, and the
family's initializer."""

import copy
import json

import pytest
import torch
import transformers

import bertkit
from bertkit.errors import BertkitError
from bertkit.interop.hf import hf_state_dict
from bertkit.layers import SelfAttention
from bertkit.layers.masks import window_mask
from bertkit.models.modern import ModernConfig
from conftest import max_diff_on_real, randomize

TOL = 1e-4
BLOCKS = SelfAttention._blocks
# 3 layers: global, local, local (window of 2 either side), biases on so none can be dropped.
SMALL = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
             max_position_embeddings=64, pad_token_id=0, local_attention=4, global_attn_every_n_layers=3,
             global_rope_theta=1000.0, local_rope_theta=50.0, attention_bias=True, mlp_bias=True, norm_bias=True)


def reference(cls_name="ModernBertModel", attn="sdpa", **kw):
    config = transformers.ModernBertConfig(**{**SMALL, **kw})
    config._attn_implementation = attn
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(config)
    randomize(model, 0)
    return model.eval()


def loaded(ref, path):
    ref.save_pretrained(path)
    return bertkit.from_pretrained(path)


def batch(left=False, T=14):
    g = torch.Generator().manual_seed(1)
    lengths = [T, T * 2 // 3, 3]
    ids = torch.randint(1, 99, (3, T), generator=g)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    if left:
        mask = mask.flip(1)
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("T", [14, 40])
def test_rotary_positions_and_windows_follow_transformers_with_either_padding(left, T, tmp_path, monkeypatch):
    """Positions count in the padded row (left padding shifts them, as in transformers), on the
    packed path and on the padded one alike; at 40 tokens (> 8 x the half-window of 2) the local
    layers run by blocks."""
    blocks = []
    monkeypatch.setattr(SelfAttention, "_blocks", lambda self, *a: blocks.append(1) or BLOCKS(self, *a))
    ref = reference()
    assert_both_paths_match(ref, loaded(ref, tmp_path), *batch(left, T))
    assert bool(blocks) == (T == 40)


def assert_both_paths_match(ref, ours, ids, mask):
    """The packed and the padded path each give transformers' states on the real tokens."""
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(ids, mask).last_hidden_state
        ours.backbone.unpad = False
        padded = ours(ids, mask).last_hidden_state
    assert max_diff_on_real(got, expected, mask) <= TOL
    assert max_diff_on_real(padded, expected, mask) <= TOL


def test_a_period_of_0_beside_layer_types_is_unread_as_in_transformers(tmp_path):
    ref = reference(layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    ref.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["global_attn_every_n_layers"] = 0
    (tmp_path / "config.json").write_text(json.dumps(config))
    theirs = transformers.AutoModel.from_pretrained(tmp_path).eval()
    assert_both_paths_match(theirs, bertkit.from_pretrained(tmp_path), *batch(T=14))


@pytest.mark.parametrize("window", [0, 1])
def test_a_window_of_0_or_1_leaves_each_token_alone_as_in_transformers(window, tmp_path):
    """local_attention 0 or 1 (half-window 0): a local layer's query sees only its own key, on
    the packed and the padded path (the blocked path divided by the window before)."""
    ref = reference(local_attention=window)
    assert_both_paths_match(ref, loaded(ref, tmp_path), *batch(T=40))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padding", ["none", "keys", "bucket"])
def test_blocked_local_attention_equals_the_masked_full_one(padding, dtype):
    """_blocks against full attention under window_mask, values and gradients, for plain rows,
    rows with padding keys, and bucket rows (padding slots at position -1, attention.py); in
    bf16 both run as batched matmuls on CPU."""
    torch.manual_seed(0)
    attn = SelfAttention(ModernConfig(hidden_size=16, num_heads=2, intermediate_size=8, vocab_size=10,
                                      pad_token_id=0))
    attn.window = 3
    B, N, T, D = 3, 2, 50, 8
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    q, k, v = (torch.randn(B, N, T, D, dtype=dtype, requires_grad=True) for _ in range(3))
    positions, real = torch.arange(T), None
    if padding != "none":
        real = torch.arange(T)[None] < torch.tensor([[50], [31], [4]])  # (B, T)
    if padding == "bucket":
        positions = torch.arange(T).expand(B, T).masked_fill(~real, -1)
    mask, stranded = window_mask(None if real is None else real[:, None, None, :], positions, positions, 3)
    full = attn._fused(q, k, v, mask, None, 0.0).masked_fill(stranded, 0.0)
    blocked = attn._blocks(q, k, v, positions, real, 0.0)
    # A bucket's padding slots share position -1, so they see each other only within a block:
    # their rows differ, and the caller drops them. Every other row must agree.
    rows = real[:, None, :, None] if padding == "bucket" else torch.ones(1, 1, T, 1, dtype=torch.bool)
    full, blocked = full * rows, blocked * rows
    assert (full - blocked).abs().max().item() <= tol
    g = torch.randn_like(full)
    grads = torch.autograd.grad(full, (q, k, v), g)
    for a, b in zip(grads, torch.autograd.grad(blocked, (q, k, v), g)):
        assert (a - b).abs().max().item() <= tol * 5


def test_rows_longer_than_max_position_embeddings_run_as_in_transformers(tmp_path):
    """Rotary positions have no table to run off: transformers runs such rows, and so must bertkit."""
    ref = reference(max_position_embeddings=16)
    ids, mask = batch(T=40)
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        assert max_diff_on_real(loaded(ref, tmp_path)(ids, mask).last_hidden_state, expected, mask) <= TOL


def test_attention_maps_match_transformers_and_local_layers_stay_in_their_window(tmp_path):
    ref = reference(attn="eager")
    ours = loaded(ref, tmp_path)
    ids, mask = batch()
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        mine = ours(ids, mask, output_attentions=True).attentions
    real = mask.bool()[:, None, :, None] & mask.bool()[:, None, None, :]
    distance = (torch.arange(14)[:, None] - torch.arange(14)[None, :]).abs()
    for i, (a, b) in enumerate(zip(mine, theirs)):
        assert torch.isfinite(a).all()  # padding queries too, though far from every real key
        assert (a - b).abs().masked_select(real).max().item() <= TOL
        if i > 0:  # local: nothing beyond 2 positions away
            assert a[..., distance > 2].abs().max().item() == 0.0
    assert mine[0][..., distance > 2].abs().max().item() > 0.01  # global: far keys get weight


def test_masked_lm_gradients_match_transformers(tmp_path):
    """One training step's loss and every gradient (through RoPE, GeGLU, the window, the tied
    decoder), with each side's own loss code: bertkit's sparse head against transformers' labels."""
    ref = reference("ModernBertForMaskedLM", decoder_bias=True, classifier_bias=True)
    ours = loaded(ref, tmp_path).train()
    ref.train()
    ids, mask = batch()
    masked = (torch.rand(ids.shape, generator=torch.Generator().manual_seed(2)) < 0.3) & mask.bool()
    loss_ref = ref(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(~masked, -100)).loss
    logits = ours(ids, mask, masked_positions=masked).logits
    loss = torch.nn.functional.cross_entropy(logits, ids[masked])
    assert abs(loss.item() - loss_ref.item()) <= TOL
    loss.backward(), loss_ref.backward()
    grads = hf_state_dict(_grads_as_params(ours))  # by transformers' names
    theirs = {n: p.grad for n, p in ref.named_parameters()}
    assert set(grads) == set(theirs), set(grads) ^ set(theirs)
    for name, grad in grads.items():
        assert (grad - theirs[name]).abs().max().item() <= TOL, name


def _grads_as_params(model):
    """A copy of `model` whose parameters hold the gradients (to name them as transformers does)."""
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for (_, p), (_, q) in zip(model.named_parameters(), clone.named_parameters()):
            q.copy_(p.grad)
    return clone


def test_the_older_config_layout_loads(tmp_path):
    """Files written before transformers 5 give the RoPE bases as global_rope_theta /
    local_rope_theta and the schedule as global_attn_every_n_layers, without layer_types."""
    ref = reference(global_attn_every_n_layers=2)
    ref.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    for key in ("rope_parameters", "layer_types"):
        config.pop(key)
    config.update(global_rope_theta=1000.0, local_rope_theta=50.0, global_attn_every_n_layers=2)
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours = bertkit.from_pretrained(tmp_path)
    assert [ours.config.is_global(i) for i in range(3)] == [True, False, True]
    ids, mask = batch()
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        assert max_diff_on_real(ours(ids, mask).last_hidden_state, expected, mask) <= TOL


def test_save_writes_what_transformers_reads(tmp_path):
    ours = bertkit.build(ModernConfig(vocab_size=99, hidden_size=32, num_layers=4, num_heads=4, intermediate_size=37,
                                      pad_token_id=0, global_every=2, local_rope_theta=77.0, local_attention=6))
    ours.save_pretrained(tmp_path)
    theirs = transformers.AutoModel.from_pretrained(tmp_path).eval()
    assert theirs.config.layer_types == ["full_attention", "sliding_attention"] * 2
    assert theirs.config.rope_parameters["sliding_attention"]["rope_theta"] == 77.0
    # transformers' default special ids (50281, 50282) lie outside this vocabulary: none written
    assert theirs.config.cls_token_id is None and theirs.config.sep_token_id is None
    ids, mask = batch()
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
        assert max_diff_on_real(ours.eval()(ids, mask).last_hidden_state, expected, mask) <= TOL


def test_save_with_a_tokenizer_writes_its_special_ids(tmp_path, minilm_dir):
    # a ModernBERT pre-trained here wrote null cls / sep / bos / eos ids beside a tokenizer that has them
    ours = bertkit.Model(ModernConfig(vocab_size=30522, hidden_size=32, num_layers=2, num_heads=4,
                                      intermediate_size=37, pad_token_id=0), tokenizer=minilm_dir)
    ours.save_pretrained(tmp_path)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    reference = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    assert (config.cls_token_id, config.sep_token_id) == (reference.cls_token_id, reference.sep_token_id)
    assert (config.bos_token_id, config.eos_token_id) == (reference.cls_token_id, reference.sep_token_id)


def test_an_old_layout_local_rope_theta_of_null_is_the_global_base(tmp_path):
    """transformers 4 rotated the local layers by global_rope_theta when local_rope_theta was None."""
    ref = reference(local_rope_theta=SMALL["global_rope_theta"])
    ref.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("rope_parameters")
    config.update(global_rope_theta=SMALL["global_rope_theta"], local_rope_theta=None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours = bertkit.from_pretrained(tmp_path)
    assert ours.config.local_rope_theta == SMALL["global_rope_theta"]
    ids, mask = batch()
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        assert max_diff_on_real(ours(ids, mask).last_hidden_state, expected, mask) <= TOL


@pytest.mark.parametrize("layer_types, every", [(["local", "global", "local"], None), (["global", "local", "local"], 3),
                                                ([], 2)])
def test_global_attn_every_n_layers_is_saved_only_where_it_gives_the_same_layers(layer_types, every, tmp_path):
    """transformers 4 reads only global_attn_every_n_layers (layer i global iff i % n == 0),
    transformers 5 layer_types: a schedule the period cannot describe is saved without it."""
    ours = bertkit.build(ModernConfig(vocab_size=99, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=37,
                                      pad_token_id=0, global_every=every or 3, layer_types=layer_types,
                                      local_rope_theta=33.0, local_attention=4))
    randomize(ours, 0)
    ours.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written.get("global_attn_every_n_layers") == every
    theirs = transformers.AutoModel.from_pretrained(tmp_path).eval()
    assert theirs.config.layer_types == [("sliding_attention", "full_attention")[ours.config.is_global(i)]
                                         for i in range(3)]
    again = bertkit.from_pretrained(tmp_path)
    ids, mask = batch()
    with torch.no_grad():
        mine = ours.eval()(ids, mask).last_hidden_state
        assert max_diff_on_real(mine, theirs(input_ids=ids, attention_mask=mask).last_hidden_state, mask) <= TOL
        assert torch.equal(again(ids, mask).last_hidden_state, mine)


@pytest.mark.parametrize("change, message", [
    ({"rope_parameters": {"full_attention": {"rope_type": "linear", "rope_theta": 10.0, "factor": 2.0}}},
     "rope_type 'linear' is not supported"),
    ({"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": None}}},
     r"config.json: rope_parameters.full_attention.rope_theta must be a number, got None$"),
    ({"local_attention": -2}, r"config.json: local_attention must be >= 0 \(the sliding window's width\), got -2$"),
    ({"global_attn_every_n_layers": 0, "layer_types": None},  # (beside layer_types it is unread)
     r"config.json: global_attn_every_n_layers must be >= 1, got 0$"),
    ({"layer_types": ["full_attention", "chunked_attention", "full_attention"]}, "unknown layer type"),
    ({"layer_types": ["full_attention"]}, "layer_types has 1 entries for num_layers=3"),
    ({"classifier_pooling": "max"}, "classifier_pooling must be one of cls, mean"),
])
def test_configs_bertkit_cannot_compute_are_refused_by_name(change, message, tmp_path):
    reference().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(change)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(BertkitError, match=message) as error:
        bertkit.from_pretrained(tmp_path)
    assert str(tmp_path / "config.json") in str(error.value)


def test_fresh_weights_follow_modernberts_initializer():
    """Truncated normals cut at 2 sigma; projections back into the residual stream (attention
    output, GeGLU down, the head's dense layer) get sigma / sqrt(2 * layers); the classifier
    hidden ** -0.5. (transformers' ModernBertPreTrainedModel._init_weights does the same.)"""
    config = ModernConfig(vocab_size=500, hidden_size=128, num_layers=8, num_heads=4, intermediate_size=256,
                          pad_token_id=0)
    torch.manual_seed(0)
    model = bertkit.build(config, head="classification")
    sigma, into = 0.02, 0.02 / (2 * 8) ** 0.5
    block = model.backbone.encoder.layers[5]
    expected = [(block.attn.query.weight, sigma), (block.ffn.up.weight, sigma),
                (model.backbone.embeddings.word.weight[1:], sigma), (block.attn.out_proj.weight, into),
                (block.ffn.down.weight, into), (model.head.dense.weight, into),
                (model.head.classifier.weight, 128 ** -0.5)]
    for weight, std in expected:
        assert weight.abs().max().item() <= 2 * std
        # a normal cut at 2 sigma keeps 88% of its standard deviation
        assert abs(weight.std().item() / (0.88 * std) - 1) < 0.15
    assert model.backbone.embeddings.word.weight[0].abs().max().item() == 0.0  # padding row
    transform = bertkit.build(config, head="mlm").head.transform.weight
    assert transform.abs().max().item() <= 2 * into
