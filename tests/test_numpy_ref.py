"""The NumPy reference against torch and against calculus.

Forward: logits equal the torch mini-bert's on the same weights (padding included). Backward:
every hand-written gradient equals finite differences (float64, op by op and for the whole
model, dropout included) and torch autograd on the same weights and batch. And the package
imports and runs with torch made unimportable.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import bertkit
from bertkit import numpy_ref
from bertkit.errors import BertkitError
from bertkit.numpy_ref import ops
from conftest import make_batch, randomize

MINI = numpy_ref.PRESETS["mini-bert"].replace(hidden_dropout=0.0, attention_dropout=0.0)
TINY = MINI.replace(vocab_size=40, hidden_size=16, num_heads=2, intermediate_size=24, num_layers=2,
                    max_positions=12)


def torch_and_numpy(config, dtype, seed=0):
    """A torch MLM model with every parameter random (biases and LayerNorms too) and the NumPy
    model holding the same values."""
    model = bertkit.build(config, head="mlm").to(dtype).eval()
    randomize(model, seed)
    params = {n: p.detach().numpy() for n, p in model.named_parameters()}
    return model, numpy_ref.BertForMaskedLM(config, np.float64 if dtype == torch.float64 else np.float32,
                                            params=params)


def mlm_labels(ids, mask, seed, rate=0.3):
    g = torch.Generator().manual_seed(seed)
    chosen = (torch.rand(ids.shape, generator=g) < rate) & mask.bool()
    chosen[0, 1] = True  # never an empty selection
    return torch.where(chosen, ids, torch.full_like(ids, -100))


# ---- forward parity ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-5), (torch.float32, 1e-4)])
@pytest.mark.parametrize("with_types", [False, True])
def test_forward_matches_torch_mini_bert(dtype, tol, with_types):
    model, ref = torch_and_numpy(MINI, dtype)
    ids, mask, types = make_batch(MINI.vocab_size, MINI.type_vocab_size, lengths=(64, 37, 5, 20))
    types = types if with_types else None
    with torch.no_grad():
        expected = model(ids, mask, types).logits.numpy()  # (B, T, V)
    got = ref.forward(ids.numpy(), mask.numpy(), None if types is None else types.numpy())
    assert got.shape == expected.shape and got.dtype == expected.dtype
    real = mask.bool().numpy()
    assert np.abs(got[real] - expected[real]).max() <= tol
    assert np.isfinite(got).all()  # pad positions: finite, meaningless


def test_forward_without_mask_and_with_bool_mask():
    model, ref = torch_and_numpy(TINY, torch.float64)
    ids, mask, _ = make_batch(TINY.vocab_size, 2, lengths=(7, 7))
    with torch.no_grad():
        expected = model(ids).logits.numpy()
    assert np.abs(ref.forward(ids.numpy()) - expected).max() <= 1e-10
    assert np.abs(ref.forward(ids.numpy(), mask.numpy().astype(bool)) - expected).max() <= 1e-10


def test_bad_inputs_are_one_line_errors():
    ref = numpy_ref.build(TINY)
    with pytest.raises(BertkitError, match="exceeds the model's maximum"):
        ref.forward(np.ones((1, TINY.max_positions + 1), dtype=np.int64))
    with pytest.raises(BertkitError, match="must lie in"):
        ref.forward(np.array([[1, TINY.vocab_size]]))
    with pytest.raises(BertkitError, match="attention_mask has shape"):
        ref.forward(np.ones((2, 3), dtype=np.int64), np.ones((2, 4)))
    with pytest.raises(BertkitError, match="integer array"):
        ref.forward(np.ones((2, 3)))
    with pytest.raises(BertkitError, match="length >= 1"):
        ref.forward(np.zeros((1, 0), dtype=np.int64))
    ids = np.array([[2, 5, 6, 3]])
    for labels, words in ((np.array([[-100, TINY.vocab_size, -100, -100]]), "must be -100 or lie in"),
                          (np.array([[-100, -5, -100, -100]]), "must be -100 or lie in"),  # scored token V-5
                          (np.array([[1, 2]]), "labels has shape")):                      # scored other positions
        for step in (ref.mlm_loss, ref.forward_backward):
            with pytest.raises(BertkitError, match=words):
                step(ids, None, labels)
    with pytest.raises(BertkitError, match="pre-LN"):
        numpy_ref.build(TINY.replace(norm_first=True))
    with pytest.raises(BertkitError, match="unknown model"):
        numpy_ref.build("no-such-model")


# ---- gradients against torch autograd ------------------------------------------------------------

def torch_mlm_grads(model, ids, mask, labels, types=None):
    masked = labels != -100
    logits = model(ids, mask, types, masked_positions=masked).logits  # (K, V)
    loss = F.cross_entropy(logits, labels[masked])
    model.zero_grad()
    loss.backward()
    return loss.item(), {n: p.grad.numpy() for n, p in model.named_parameters()}


def relative_error(a, b):
    """Max error relative to the largest expected entry. The floor serves the key bias, whose
    true gradient is zero (it adds the same q . b_k to every score of a row, which softmax
    ignores), so both sides hold rounding noise of ~1e-17 there."""
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-9)


@pytest.mark.parametrize("with_types", [False, True])
def test_gradients_match_torch_autograd_float64(with_types):
    config = MINI.replace(num_layers=2)
    model, ref = torch_and_numpy(config, torch.float64, seed=1)
    ids, mask, types = make_batch(config.vocab_size, config.type_vocab_size, lengths=(64, 33, 9))
    ids[0, 3] = config.pad_token_id  # a pad id at an attended position: its lookup gets no gradient
    types = types if with_types else None
    labels = mlm_labels(ids, mask, seed=2)
    loss, expected = torch_mlm_grads(model, ids, mask, labels, types)
    result = ref.forward_backward(ids.numpy(), mask.numpy(), labels.numpy(),
                                  None if types is None else types.numpy())
    assert abs(result.loss - loss) <= 1e-10
    assert result.predicted == int((labels != -100).sum())
    assert set(ref.grads) == set(expected)
    for name, g in expected.items():
        assert relative_error(ref.grads[name], g) <= 1e-6, name


def test_recomputation_and_accumulation_give_the_same_gradients():
    base = numpy_ref.build(TINY, dtype=np.float64, seed=3)
    ref = numpy_ref.BertForMaskedLM(TINY.replace(hidden_dropout=0.2, attention_dropout=0.1), np.float64,
                                    params=base.params).train()  # dropout on: masks must be redrawn equal
    ids, mask, _ = make_batch(TINY.vocab_size, 2, lengths=(12, 8, 5))
    labels = mlm_labels(ids, mask, seed=4).numpy()
    ids, mask = ids.numpy(), mask.numpy()

    def grads(recompute):
        ref.recompute = recompute
        ref.rng = np.random.default_rng(7)
        ref.zero_grad()
        ref.forward_backward(ids, mask, labels)
        return {k: v.copy() for k, v in ref.grads.items()}

    plain, recomputed = grads(False), grads(True)
    for name in plain:
        np.testing.assert_array_equal(plain[name], recomputed[name], err_msg=name)
    # two half-scaled passes accumulate to one full one
    ref.recompute = False
    ref.zero_grad()
    for _ in range(2):
        ref.rng = np.random.default_rng(7)
        ref.forward_backward(ids, mask, labels, scale=0.5)
    for name in plain:
        np.testing.assert_allclose(ref.grads[name], plain[name], rtol=1e-12, atol=1e-15, err_msg=name)


# ---- gradients against finite differences -----------------------------------------------------

def directional_check(f, x, analytic, seed=0, h=1e-6):
    """Central difference of f along a random direction u against <analytic gradient, u>:
    equal to 1e-6 relative, plus the rounding noise of the difference quotient itself (a few
    float64 ulps of f divided by h), which matters only where the true derivative is ~0."""
    u = np.random.default_rng(seed).standard_normal(x.shape)
    saved = x.copy()
    x += h * u
    up = f()
    x[...] = saved - h * u
    down = f()
    x[...] = saved
    numeric = (up - down) / (2 * h)
    exact = float(np.sum(analytic * u))
    noise = 8 * np.finfo(np.float64).eps * max(abs(up), abs(down), 1.0) / h
    assert abs(numeric - exact) <= 1e-6 * abs(exact) + noise, (numeric, exact)


def op_check(op_forward, op_backward, x, seed=0):
    """Loss = sum(w * op(x)) for a fixed random w: its gradient in x is op's backward of w."""
    w = np.random.default_rng(seed + 100).standard_normal(op_forward(x).shape)
    dx = op_backward(w)
    directional_check(lambda: float(np.sum(w * op_forward(x))), x, dx, seed)


def params_and_grads(**shapes):
    rng = np.random.default_rng(5)
    params = {k: rng.standard_normal(s) for k, s in shapes.items()}
    return params, {k: np.zeros_like(v) for k, v in params.items()}


def test_linear_backward():
    params, grads = params_and_grads(w=(5, 4), b=(5,))
    op = ops.Linear(params, grads, "w", "b")
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    op_check(op.forward, op.backward, x)
    for name in ("w", "b"):  # parameter gradients, from a fresh backward
        grads[name][...] = 0
        w = np.random.default_rng(100).standard_normal((2, 3, 5))
        op.forward(x)
        op.backward(w)
        directional_check(lambda: float(np.sum(w * op.forward(x))), params[name], grads[name].copy())


def test_layernorm_backward():
    params, grads = params_and_grads(n_weight=(6,), n_bias=(6,))
    params = {"n.weight": params["n_weight"], "n.bias": params["n_bias"]}
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    op = ops.LayerNorm(params, grads, "n", 1e-12)
    x = np.random.default_rng(1).standard_normal((3, 4, 6)) * 3 + 1
    op_check(op.forward, op.backward, x)
    w = np.random.default_rng(100).standard_normal(x.shape)
    for name in params:
        grads[name][...] = 0
        op.forward(x)
        op.backward(w)
        directional_check(lambda: float(np.sum(w * op.forward(x))), params[name], grads[name].copy())


def test_gelu_backward():
    op = ops.GELU()
    x = np.random.default_rng(2).standard_normal((4, 7)) * 3
    op_check(op.forward, op.backward, x)
    np.testing.assert_allclose(op.forward(x), F.gelu(torch.from_numpy(x)).numpy(), rtol=1e-14, atol=1e-15)


def test_float32_normal_cdf_is_within_float32_rounding_of_scipy():
    """float32 GELU uses Abramowitz & Stegun 7.1.26 instead of scipy's (slow) erf."""
    from scipy.special import ndtr

    x = np.linspace(-12, 12, 200_001)
    cdf, pdf = ops.normal_cdf_pdf(x.astype(np.float32))
    assert cdf.dtype == pdf.dtype == np.float32
    assert np.abs(cdf - ndtr(x)).max() <= 4e-7  # 7.5e-8 formula + a few float32 ulps of 1
    exact_pdf = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    assert np.abs(pdf - exact_pdf).max() <= 1e-7
    op = ops.GELU()
    gelu = op.forward(x.astype(np.float32))
    assert np.abs(gelu - x * ndtr(x)).max() <= 1e-6 * 12
    slope = op.backward(np.ones_like(gelu))
    assert np.abs(slope - (ndtr(x) + x * exact_pdf)).max() <= 1e-5


def test_attention_backward_with_padding_and_dropout():
    H, N = 8, 2
    shapes = {f"a.{p}.{k}": ((H, H) if k == "weight" else (H,))
              for p in ("query", "key", "value", "out_proj") for k in ("weight", "bias")}
    params, grads = params_and_grads(**shapes)
    op = ops.SelfAttention(params, grads, "a", N, dropout=0.3)
    x = np.random.default_rng(3).standard_normal((2, 5, H))
    bias = np.zeros((2, 1, 1, 5))
    bias[1, ..., 3:] = -np.inf  # second row: two padding keys
    fwd = lambda x_: op.forward(x_, bias, np.random.default_rng(9))  # same dropout mask each call
    op_check(fwd, op.backward, x)
    w = np.random.default_rng(100).standard_normal(x.shape)
    for name in params:
        for g in grads.values():
            g[...] = 0
        fwd(x)
        op.backward(w)
        directional_check(lambda: float(np.sum(w * fwd(x))), params[name], grads[name].copy())


def test_cross_entropy_gradient():
    logits = np.random.default_rng(4).standard_normal((6, 11)) * 4
    targets = np.array([0, 3, 10, 3, 5, 1])
    loss, grad = ops.cross_entropy(logits, targets)
    assert abs(loss - F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(targets)).item()) <= 1e-12
    directional_check(lambda: ops.cross_entropy(logits, targets)[0], logits, grad)


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_whole_model_gradient_matches_finite_differences(dropout):
    """Every parameter, through embeddings (with token types and padding), blocks, tied head and
    loss; with dropout the generator is reseeded so each evaluation draws the same masks."""
    config = TINY.replace(hidden_dropout=dropout, attention_dropout=dropout)
    ref = numpy_ref.build(config, dtype=np.float64, seed=6)
    rng = np.random.default_rng(6)
    for v in ref.params.values():
        v += rng.standard_normal(v.shape) * 0.1  # no zero biases or unit gains
    ref.train()
    ids, mask, types = (t.numpy() for t in make_batch(config.vocab_size, 2, lengths=(9, 6, 4)))
    labels = mlm_labels(torch.from_numpy(ids), torch.from_numpy(mask), seed=8).numpy()

    def loss():
        ref.rng = np.random.default_rng(11)
        result = ref.forward_backward(ids, mask, labels, types)
        return result.loss

    ref.zero_grad()
    loss()
    analytic = {k: v.copy() for k, v in ref.grads.items()}
    for i, (name, value) in enumerate(ref.params.items()):
        directional_check(loss, value, analytic[name], seed=i)


def test_no_prediction_gives_zero_loss_and_gradient():
    ref = numpy_ref.build(TINY, dtype=np.float64)
    ids = np.ones((2, 5), dtype=np.int64)
    result = ref.forward_backward(ids, None, np.full((2, 5), -100))
    assert result.loss == 0.0 and result.predicted == 0
    assert all(not g.any() for g in ref.grads.values())


# ---- no torch -------------------------------------------------------------------------------------

def test_imports_and_runs_with_torch_blocked(tmp_path):
    """A subprocess in which `import torch` fails imports bertkit.numpy_ref, builds, runs a
    forward and a training step, saves and loads back."""
    script = textwrap.dedent(f"""
        import sys

        class NoTorch:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked in this test")
                return None

        sys.meta_path.insert(0, NoTorch())
        import numpy as np
        from bertkit import numpy_ref
        model = numpy_ref.build("mini-bert", num_layers=1)
        ids = np.arange(12).reshape(2, 6) + 5
        logits = model.forward(ids, np.ones_like(ids))
        assert logits.shape == (2, 6, 8192), logits.shape
        labels = np.where(ids % 3 == 0, ids, -100)
        numpy_ref.train(model, [{{"input_ids": ids, "labels": labels}}], steps=2, out={str(tmp_path)!r})
        again = numpy_ref.from_pretrained({str(tmp_path)!r})
        assert np.allclose(again.forward(ids), model.forward(ids))
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch was imported"
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
