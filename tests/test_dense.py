"""dense.py: linear layers through oneDNN on CPU agree with nn.Linear, forward and backward, and
step aside where they must (hooks, autocast, subclasses)."""

import pytest
import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.layers import dense as D
from bertkit.layers.activations import activation

pytestmark = pytest.mark.skipif(not D.ONEDNN, reason="this torch has no oneDNN (mkldnn) build")

# The dtypes oneDNN's matmul runs in on this CPU: bf16 only with AVX-512 / AMX (an AVX2-only CPU
# takes torch's own bf16 linear, test_bf16_without_onednn_support_takes_torchs_linear).
ONEDNN_DTYPES = [torch.float32, *([torch.bfloat16] if D.ONEDNN_BF16 else [])]


def layer(bias: bool = True, dtype=torch.float32) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(48, 80, bias=bias).to(dtype)


@pytest.mark.parametrize("act", [None, *D.FUSED_ACTIVATIONS])
@pytest.mark.parametrize("dtype", ONEDNN_DTYPES)
def test_inference_matches_linear_and_activation(act, dtype):
    """The fused bias and activation give F.linear's numbers (rounding apart) on (B, T, in)."""
    lin = layer(dtype=dtype)
    x = torch.randn(3, 7, 48).to(dtype)
    with torch.inference_mode():
        got = D.dense(x, lin) if act is None else D.dense_act(x, lin, act)
        # The reference in fp32 from the same (rounded) inputs; bf16 results round once more.
        want = nn.functional.linear(x.float(), lin.weight.float(), lin.bias.float())
        want = want if act is None else activation(act)(want)
    assert got.shape == (3, 7, 80) and got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2 * want.abs().max().item()
    assert (got.float() - want).abs().max().item() <= tol


def test_activation_without_post_op_is_left_to_the_caller():
    lin, x = layer(), torch.randn(5, 48)
    with torch.inference_mode():
        assert D.dense_act(x, lin, "gelu_fast") is None and D.dense_act(x, lin, "quick_gelu") is None
    assert D.dense_act(x, lin, "gelu") is None  # autograd records: no fused forward without a backward


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_grad", [True, False])
def test_training_gradients_equal_autograd(bias, x_grad):
    """When autograd records, dense runs _Linear: same output and gradients as nn.Linear's."""
    lin = layer(bias)
    x = torch.randn(4, 9, 48, requires_grad=x_grad)
    g = torch.randn(4, 9, 80)
    ours = D.dense(x, lin)
    assert ours.grad_fn is not None and "Linear" in type(ours.grad_fn).__name__
    grads_ours = torch.autograd.grad(ours, [x, *lin.parameters()] if x_grad else list(lin.parameters()), g)
    ref = lin(x)
    grads_ref = torch.autograd.grad(ref, [x, *lin.parameters()] if x_grad else list(lin.parameters()), g)
    assert (ours - ref).abs().max().item() <= 1e-5
    for a, b in zip(grads_ours, grads_ref):
        assert a.shape == b.shape and (a - b).abs().max().item() <= 1e-4


def test_hooks_autocast_and_subclasses_go_through_the_module():
    """A forward hook on the layer still runs; under autocast the module casts; a subclass keeps
    its own forward."""
    lin, x = layer(), torch.randn(2, 48)
    seen = []
    handle = lin.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    with torch.inference_mode():
        D.dense(x, lin)
    D.dense(x, lin)
    handle.remove()
    assert seen == [(2, 80), (2, 80)]
    with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
        assert D.dense(x, lin).dtype == torch.bfloat16

    class Doubled(nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    twice = Doubled(48, 80)
    twice.load_state_dict(lin.state_dict())
    with torch.inference_mode():
        assert torch.allclose(D.dense(x, twice), 2 * lin(x), atol=1e-5)


@pytest.mark.parametrize("train", [False, True])
def test_compiled_graphs_call_onednn_as_an_opaque_op(train):
    """Under torch.compile dense and dense_act run bertkit::linear_pointwise (inductor would
    lower a plain linear to MKL's addmm), with eager's numbers and gradients."""
    import torch._dynamo
    from torch.profiler import profile

    torch._dynamo.reset()
    up, down = layer(), nn.Linear(80, 48)

    def ffn(x):
        h = D.dense_act(x, up, "gelu")
        return D.dense(D.dense(x, up).relu() if h is None else h, down)

    compiled = torch.compile(ffn, dynamic=True)
    x = torch.randn(13, 48, requires_grad=train)
    with torch.set_grad_enabled(train), profile() as prof:
        got = compiled(x)
    with torch.set_grad_enabled(train):
        want = ffn(x)
    assert any(e.name == "bertkit::linear_pointwise" for e in prof.events())
    assert "addmm" not in {e.name.removeprefix("aten::") for e in prof.events()}
    assert (got - want).abs().max().item() <= 1e-5
    if train:
        g = torch.randn_like(want)
        for a, b in zip(torch.autograd.grad(got, [x, *up.parameters(), *down.parameters()], g),
                        torch.autograd.grad(want, [x, *up.parameters(), *down.parameters()], g)):
            assert (a - b).abs().max().item() <= 1e-4


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_jit_trace_records_aten_linear_and_reproduces_the_model():
    """torch.jit.trace (also the road to ONNX export) cannot record oneDNN's op: while it traces,
    dense and linear take F.linear, and the traced model gives the eager outputs."""
    import bertkit

    torch.manual_seed(0)
    model = bertkit.build("mini-bert", head="mlm").eval()
    ids = torch.randint(5, 1000, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0

    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, mask):
            return self.model(ids, mask).logits

    with torch.no_grad():
        traced = torch.jit.trace(Logits(), (ids, mask), check_trace=False)
        got, want = traced(ids, mask), model(ids, mask).logits
    graph = str(traced.inlined_graph)
    assert "aten::linear" in graph and "mkldnn" not in graph
    keep = mask.bool()
    assert (got[keep] - want[keep]).abs().max().item() <= 1e-5


def served_weights(monkeypatch) -> list[bool]:
    """Records, per oneDNN call, whether it got a packed weight."""
    seen, call = [], D._onednn
    monkeypatch.setattr(D, "_onednn", lambda x, w, *rest: seen.append(w.is_mkldnn) or call(x, w, *rest))
    return seen


@pytest.mark.parametrize("dtype", ONEDNN_DTYPES)
def test_prepacked_weights_serve_every_linear_with_the_same_numbers(dtype, monkeypatch):
    """Model.prepack(): every linear of the blocks and the MLM head runs on its packed weight,
    and the outputs are the unpacked ones exactly (the same products)."""
    import bertkit

    torch.manual_seed(0)
    model = bertkit.build("mini-bert", head="mlm").to(dtype).eval()
    ids, mask = torch.randint(5, 1000, (3, 20)), torch.ones(3, 20, dtype=torch.long)
    mask[1, 9:] = 0
    seen = served_weights(monkeypatch)
    with torch.inference_mode():
        want = model(ids, mask).logits
        assert seen and not any(seen)
        seen.clear()
        got = model.prepack()(ids, mask).logits
    assert seen and all(seen)
    assert torch.equal(got, want)


def test_a_prepacked_weight_changed_afterwards_serves_as_it_is_now(monkeypatch):
    """A weight changed in place (an optimizer step, load_state_dict), replaced or moved after
    prepack() must not be computed with its stale packed copy; train() drops the copies, and
    copies of the model (deepcopy, torch.save) work and start unpacked."""
    import copy
    import io

    import bertkit
    from bertkit.errors import BertkitError

    torch.manual_seed(0)
    model = bertkit.build("mini-bert").eval().prepack()
    fresh = bertkit.build("mini-bert").eval()  # other weights
    ids = torch.randint(5, 1000, (2, 16))
    seen = served_weights(monkeypatch)

    def outputs(m):
        with torch.inference_mode():
            return m(ids).last_hidden_state

    block = model.backbone.encoder.layers[0]
    with torch.no_grad():
        next(m for m in block.modules() if isinstance(m, nn.Linear)).weight.mul_(2)  # in place
    seen.clear()
    changed = outputs(model)
    assert not all(seen) and any(seen)  # the changed layer went unpacked, the others packed
    assert torch.equal(changed, outputs(copy.deepcopy(model)))  # a copy has no packed weights
    model.load_state_dict(fresh.state_dict())
    assert torch.equal(outputs(model), outputs(fresh))
    model.prepack()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.weight = nn.Parameter(m.weight.detach() * 3)  # replaced
    seen.clear()
    tripled = outputs(model)
    assert not any(seen) and not torch.equal(tripled, outputs(fresh))
    model.prepack()
    torch.save(model, io.BytesIO())
    assert outputs(model.to(torch.bfloat16)).dtype == torch.bfloat16  # moved: new tensors
    model.prepack().train()
    assert not D._PACKED.get(next(m for m in model.modules() if isinstance(m, nn.Linear)))
    with pytest.raises(BertkitError, match="eval"):
        model.prepack()
    with torch.inference_mode():  # weights without a version counter pack too
        made_here = bertkit.build("mini-bert").eval()
        want = made_here(ids).last_hidden_state
        seen.clear()
        assert torch.equal(made_here.prepack()(ids).last_hidden_state, want) and all(seen)


@pytest.mark.parametrize("optimizer", ["AdamW", "Adam", "SGD"])
def test_a_fused_optimizer_step_drops_the_packed_copies_of_the_weights_it_updated(optimizer):
    """torch's fused optimizer kernels write the weights without counting a version, so after a
    step on a prepacked model in eval mode (no dropout) the forward mixed the linears' weights of
    before the step with the embeddings of after it (outside tester: 1.57 off)."""
    import bertkit

    torch.manual_seed(0)
    model = bertkit.build("mini-bert", head="mlm", num_layers=2).eval().prepack()
    other = bertkit.build("mini-bert", num_layers=1).eval().prepack()  # not in the optimizer: stays packed
    ids = torch.randint(5, 1000, (2, 16))
    model(ids).logits.square().mean().backward()
    getattr(torch.optim, optimizer)(model.parameters(), lr=0.01, fused=True).step()
    with torch.no_grad():
        stepped = model(ids).logits
        assert not any(D.packed(m) for m in model.modules() if isinstance(m, nn.Linear))
        assert all(D.packed(m) for m in other.modules() if isinstance(m, nn.Linear))
        assert torch.equal(stepped, model.prepack(False)(ids).logits)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_prepacked_model_compiles_and_traces_on_its_plain_weights():
    """torch.compile and torch.jit.trace know only plain tensors: a prepacked model compiled or
    traced gives its eager numbers (the packed copies serve eager calls only)."""
    import torch._dynamo

    import bertkit

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = bertkit.build("mini-bert", head="mlm").eval().prepack()
    ids = torch.randint(5, 1000, (2, 12))

    class Logits(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(ids).logits

    with torch.no_grad():
        want = model(ids).logits
        traced = torch.jit.trace(Logits(), (ids,), check_trace=False)
        assert (traced(ids) - want).abs().max().item() <= 1e-5
        got = model.compile()(ids).logits
    assert (got - want).abs().max().item() <= 1e-5


@pytest.mark.skipif(not D.ONEDNN_BF16, reason="oneDNN has no bf16 matmul on this CPU (AVX2 only)")
@pytest.mark.parametrize("name", ["mini-bert", "modernbert-base"])
def test_bf16_copies_packed_for_autocast_serve_every_block_linear_with_autocasts_numbers(name, monkeypatch):
    """prepack(dtype=bf16) on an fp32 model: under CPU autocast to bf16 every linear of the
    blocks (the gated feed-forward included) runs on its packed bf16 copy, and the outputs are
    autocast's own to bf16 rounding; outside autocast the fp32 weights serve, unchanged."""
    import bertkit

    torch.manual_seed(0)
    small = {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "intermediate_size": 96} if name != "mini-bert" else {}
    model = bertkit.build(name, **small).eval()
    ids, mask = torch.randint(5, 1000, (3, 20)), torch.ones(3, 20, dtype=torch.long)
    mask[1, 9:] = 0
    blocks = model.backbone.encoder.layers
    linears = sum(type(m) is nn.Linear for m in blocks.modules())
    seen = served_weights(monkeypatch)

    def run(autocast: bool) -> torch.Tensor:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return model(ids, mask).last_hidden_state.float()

    exact, want = run(False), run(True)
    model.prepack(dtype=torch.bfloat16)
    seen.clear()
    got = run(True)
    assert len(seen) == linears and all(seen)
    # Same rounding budget as autocast's own: bf16 products, one rounding per layer output.
    assert (got - want).abs().max() <= 2 * (want - exact).abs().max() + 1e-6
    seen.clear()
    assert torch.equal(run(False), exact) and not any(seen)  # fp32: the plain weights


def test_prepack_takes_dtype_names_and_refuses_a_dtype_it_would_not_pack():
    """prepack(dtype=...) took anything: "bfloat16" (a name, as from_pretrained takes it) packed
    no bf16 copies, and float16, "fp16" or int8 did nothing without a word."""
    import bertkit

    model = bertkit.build("mini-bert").eval()
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    for named, given in (("bfloat16", torch.bfloat16), ("torch.float32", torch.float32)):
        packs = []
        for dtype in (given, named):
            model.prepack(dtype=dtype)
            packs.append([(D.packed(m), D._PACKED[m][1] if D.packed(m) else None) for m in linears])
            model.prepack(False)
        assert packs[0] == packs[1], named
    assert all(p for p, _ in packs[0]) == D.onednn_dtype(torch.float32)  # the fp32 copies, where oneDNN serves
    for wrong, said in ((torch.float16, "model's own torch.float32, got torch.float16"), ("fp16", "got 'fp16'"),
                        (torch.int8, "got torch.int8")):
        with pytest.raises(BertkitError, match=f"^prepack's dtype .*{said}"):
            model.prepack(dtype=wrong)
    assert not any(D.packed(m) for m in linears)


@pytest.mark.parametrize("bf16", [False, *([True] if D.ONEDNN_BF16 else [])])
def test_prepacked_for_a_block_drops_the_copies_and_keeps_a_users_own(bf16):
    """Model.prepacked(): packed inside the `with`, unpacked after (even when it raises); a model
    the user prepacked keeps its copies."""
    import bertkit

    model = bertkit.build("mini-bert").eval()
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    with model.prepacked(bf16=bf16):
        assert all(D.packed(m) for m in linears)
    assert not any(D.packed(m) for m in linears)
    with pytest.raises(ValueError), model.prepacked():
        assert all(D.packed(m) for m in linears)
        raise ValueError
    assert not any(D.packed(m) for m in linears)
    model.prepack()
    with model.prepacked(bf16=bf16):
        pass
    assert all(D.packed(m) for m in linears)


def test_bf16_without_onednn_support_takes_torchs_linear(monkeypatch):
    """On a CPU whose oneDNN has no bf16 matmul (AVX2 only: its op fails there), bf16 linears
    go through torch's own, activations unfused, nothing packs in bf16, and a bf16 model and
    an autocast one run, with F.linear's numbers exactly."""
    import bertkit

    def refuse(*args):
        raise AssertionError("oneDNN's matmul called in bf16")

    monkeypatch.setattr(D, "ONEDNN_BF16", False)
    monkeypatch.setattr(D, "_onednn", refuse)
    lin, fp32 = layer(dtype=torch.bfloat16), layer()
    x = torch.randn(3, 7, 48).bfloat16()
    with torch.inference_mode():
        assert torch.equal(D.dense(x, lin), nn.functional.linear(x, lin.weight, lin.bias))
        assert D.dense_act(x, lin, "gelu") is None  # the caller applies it
    D.pack(lin)
    D.pack(fp32, torch.bfloat16)
    assert not D.packed(lin) and not D.packed(fp32)
    torch.manual_seed(0)
    model = bertkit.build("mini-bert", head="mlm").eval()
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    ids, mask = torch.randint(5, 1000, (3, 20)), torch.ones(3, 20, dtype=torch.long)
    mask[1, 9:] = 0
    with torch.inference_mode():
        with model.prepacked(bf16=True), torch.autocast("cpu", torch.bfloat16):
            assert not any(D.packed(m) for m in linears)
            assert model(ids, mask).logits.dtype == torch.bfloat16
        model.to(torch.bfloat16).prepack()
        assert not any(D.packed(m) for m in linears)
        assert model(ids, mask).logits.dtype == torch.bfloat16
