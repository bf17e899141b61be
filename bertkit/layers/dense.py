"""Linear layers on CPU through oneDNN, with the bias and (in inference) the activation fused.

torch's F.linear on CPU multiplies fp32 through MKL and adds the bias before the product, as a
broadcast copy into the output; an activation is one more pass over the result. oneDNN's matmul
takes the bias and the activation as post-ops, applied while each output tile is still in
cache. Measured on the 2-core EPYC (torch 2.13, 4096 tokens of bert-base): fp32 768 -> 768
23.6 -> 22.0 ms, 768 -> 3072 with GELU 129 -> 107 ms, 3072 -> 768 95 -> 89 ms; bf16 gains less
(its matmul is oneDNN's already), the fused GELU most. Training takes it through `_Linear` (a
hand-written backward); the numbers agree with F.linear's to rounding (the order of the sums
differs). Under torch.compile the same oneDNN call runs as an opaque custom op: inductor would
otherwise lower these linears, whose token count is dynamic, to MKL's addmm (measured so in
fp32 and bf16, `freeze` or not).

`pack(layer)` (through `Model.prepack()`) reorders a layer's weight once into oneDNN's blocked
layout, which each call would otherwise do on the fly: bert-base inference +7% in bf16, +5% in
fp32 (same numbers), for a second copy of the weights. The packed copy serves inference only
and only while the layer's weight is the tensor it was packed from, unchanged since (autograd's
version counter; edits through `.data` bypass it, and weights made under torch.inference_mode
have none; torch's fused optimizer kernels do not count their steps, so an optimizer's step
drops the copies of the weights it updated, through a step hook): otherwise the plain weight
serves again. `pack(layer, torch.bfloat16)` on an fp32
layer packs a bf16 copy instead, for inference under CPU autocast to bf16: autocast would cast
the weight on every call (or once per autocast region), and its linear would not take the
packed layout (the predict and evaluate loops of tasks/, through Model.prepacked()).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_hooks

from .scratch import func_transforming

ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
# oneDNN's bf16 matmul needs AVX-512 (or AMX, AVX2-VNNI-2); elsewhere (an AVX2-only CPU) the op
# fails ("could not create a primitive descriptor"), and torch's own bf16 linear serves.
ONEDNN_BF16 = ONEDNN and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def onednn_dtype(dtype: torch.dtype) -> bool:
    """Whether oneDNN's matmul runs in this dtype on this CPU: fp32, and bf16 where supported."""
    return ONEDNN and (dtype == torch.float32 or dtype == torch.bfloat16 and ONEDNN_BF16)


def onednn_tensor(t: torch.Tensor) -> bool:
    """Whether oneDNN's matmul takes this tensor: on CPU, in a dtype `onednn_dtype` allows."""
    return t.device.type == "cpu" and onednn_dtype(t.dtype)


# Config activation names -> oneDNN's post-op (name, algorithm).
FUSED_ACTIVATIONS = {
    "gelu": ("gelu", "none"),  # exact (erf)
    "gelu_new": ("gelu", "tanh"),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "relu": ("relu", ""),
    "silu": ("swish", ""),
    "swish": ("swish", ""),
    "tanh": ("tanh", ""),
}


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, act: str,
            algorithm: str) -> torch.Tensor:
    """oneDNN's matmul with `act` as a post-op ("none" for none): the op itself in eager mode,
    the opaque `bertkit::linear_pointwise` while torch.compile traces."""
    if torch.compiler.is_compiling():
        return _traced(x, weight, bias, act, algorithm)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, act, [], algorithm)


if ONEDNN:
    @torch.library.custom_op("bertkit::linear_pointwise", mutates_args=())
    def _traced(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, act: str,
                algorithm: str) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, act, [], algorithm)

    @_traced.register_fake
    def _(x, weight, bias, act, algorithm):
        return x.new_empty((*x.shape[:-1], weight.shape[0]))


# layer -> (packed weight, the weight it came from, that weight's address and version). Kept
# outside the module: a packed tensor cannot be copied or pickled, so copies start unpacked.
_PACKED: "weakref.WeakKeyDictionary[nn.Linear, tuple]" = weakref.WeakKeyDictionary()


def pack(layer: nn.Linear, dtype: torch.dtype | None = None) -> None:
    """Keep `layer`'s weight packed for oneDNN as well (see the module's doc), where oneDNN
    serves it (CPU, `onednn_dtype`); `dtype` bf16 on an fp32 weight packs a bf16 copy, which
    serves under autocast to bf16 only."""
    w = layer.weight
    dtype = dtype or w.dtype
    if onednn_tensor(w) and dtype in (w.dtype, torch.bfloat16) and onednn_dtype(dtype):
        packed = torch.ops.mkldnn._reorder_linear_weight(w.detach().to(dtype))
        _PACKED[layer] = (packed, dtype, weakref.ref(w), w.data_ptr(), _version(w))
        _watch_optimizers()


_WATCHING: list = []  # the step hook, once registered


def _watch_optimizers() -> None:
    """Have every optimizer step drop the packed copies of the weights it updated: fused AdamW,
    Adam and SGD (the Trainer's, and transformers' default) write them without counting a
    version, so a packed copy of a model in eval mode served the weights of before the step."""
    if not _WATCHING:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _WATCHING.append(register_optimizer_step_post_hook(_after_step))


def _after_step(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    if not _PACKED:
        return
    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for layer in [layer for layer, entry in _PACKED.items() if id(entry[2]()) in stepped]:
        unpack(layer)


def _version(w: torch.Tensor) -> int | None:
    return None if w.is_inference() else w._version  # inference tensors keep no version counter


def unpack(layer: nn.Linear) -> None:
    _PACKED.pop(layer, None)


def packed(layer: nn.Linear) -> bool:
    return layer in _PACKED


def _packed_weight(layer: nn.Linear, dtype: torch.dtype) -> torch.Tensor | None:
    """The layer's weight packed in `dtype` while it is still valid, else None; a stale copy
    (the weight replaced, moved or changed in place since) is dropped."""
    entry = _PACKED.get(layer)
    if entry is None:
        return None
    weight, packed_dtype, source, address, version = entry
    w = layer.weight
    if not (source() is w and w.data_ptr() == address and _version(w) == version):
        unpack(layer)
        return None
    return weight if packed_dtype == dtype else None


def serving_weight(layer: nn.Linear) -> torch.Tensor:
    """The layer's packed weight while it is still valid, else its weight (always while
    something records that knows only plain tensors: torch.compile, jit.trace, torch.func)."""
    w = layer.weight
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or func_transforming():
        return w  # before the lookup: with it first, compiled blocks computed wrong numbers (torch 2.13)
    packed_w = _packed_weight(layer, w.dtype)
    return w if packed_w is None else packed_w


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias), through oneDNN on CPU in fp32 and bf16; either operand may be
    a transposed view. Not differentiable: for inference and hand-written backward passes."""
    if _serves(x, weight):
        return _onednn(x, weight, bias, "none", "")
    return F.linear(x, weight, bias)


def _serves(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """oneDNN's op can take x @ weight.T: CPU, fp32 or bf16 on both sides, and nothing recording
    that cannot hold it (torch.jit.trace: TorchScript and ONNX export know aten's linear, not
    this op; torch.func transforms: it has no batching or double-backward rules)."""
    return (onednn_tensor(x) and weight.dtype == x.dtype and not torch.jit.is_tracing()
            and not func_transforming())


def _plain(x: torch.Tensor, layer: nn.Module) -> bool:
    """A `bare` linear that `_serves`, without autocast (oneDNN's op would not be cast)."""
    return bare(layer) and _serves(x, layer.weight) and not torch.is_autocast_enabled("cpu")


def bare(layer: nn.Module) -> bool:
    """Whether a fast path may read the layer's weight and bias instead of calling it: a plain
    nn.Linear (a subclass may add to its forward: PEFT's LoRA layers, quantized ones) that no
    hook watches."""
    return type(layer) is nn.Linear and not hooked(layer)


def hooked(layer: nn.Module) -> bool:
    """Whether calling the module would run hooks (its own or global ones, forward or backward:
    pruning, activation capture, gradient capture), which a fast path that reads its weights
    directly would skip."""
    return bool(layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks
                or layer._backward_pre_hooks or module_hooks._global_forward_hooks
                or module_hooks._global_forward_pre_hooks or module_hooks._global_backward_hooks
                or module_hooks._global_backward_pre_hooks)


def _recorded(x: torch.Tensor, layer: nn.Module) -> bool:
    return torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in layer.parameters()))


def fuses(x: torch.Tensor, layer: nn.Module) -> bool:
    """Whether `dense_act` can fuse: `_plain`, and nothing recording for autograd."""
    return _plain(x, layer) and not _recorded(x, layer)


def dense(x: torch.Tensor, layer: nn.Module) -> torch.Tensor:
    """layer(x), through oneDNN where `_plain` says so: directly in inference, through `_Linear`
    (same products, hand-written backward) when autograd records."""
    if (cast := _autocast_weight(x, layer)) is not None:
        return _onednn(x.to(torch.bfloat16), cast, _bf16(layer.bias), "none", "")
    if not _plain(x, layer):
        return layer(x)
    if _recorded(x, layer):
        return _Linear.apply(x, layer.weight, layer.bias)
    return _onednn(x, serving_weight(layer), layer.bias, "none", "")


def dense_act(x: torch.Tensor, layer: nn.Module, act: str) -> torch.Tensor | None:
    """The activation named `act` (a config's hidden_act) of layer(x), fused through oneDNN
    (under autocast, on the bf16 copy packed for it); None where neither `fuses` nor
    `autocast_packed` says yes, or oneDNN has no such post-op."""
    if act not in FUSED_ACTIVATIONS:
        return None
    name, algorithm = FUSED_ACTIVATIONS[act]
    if (cast := _autocast_weight(x, layer)) is not None:
        return _onednn(x.to(torch.bfloat16), cast, _bf16(layer.bias), name, algorithm)
    if not fuses(x, layer):
        return None
    return _onednn(x, serving_weight(layer), layer.bias, name, algorithm)


def _autocast_weight(x: torch.Tensor, layer: nn.Module) -> torch.Tensor | None:
    """Under CPU autocast to bf16, in inference, a plain nn.Linear's bf16 copy packed for it
    (`pack(layer, torch.bfloat16)`); None otherwise. With it the layer computes what autocast
    would (bf16 input, weight and bias, bf16 output) without casting the weight each call."""
    if not (torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16):
        return None
    if (not bare(layer) or x.device.type != "cpu" or x.dtype not in (torch.float32, torch.bfloat16)
            or torch.compiler.is_compiling() or torch.jit.is_tracing() or func_transforming()
            or _recorded(x, layer)):
        return None
    return _packed_weight(layer, torch.bfloat16)


def autocast_packed(x: torch.Tensor, layer: nn.Module) -> bool:
    """Whether `dense` and `dense_act` serve `layer` from its bf16 copy packed for autocast."""
    return _autocast_weight(x, layer) is not None


def _bf16(bias: torch.Tensor | None) -> torch.Tensor | None:
    return None if bias is None else bias.to(torch.bfloat16)  # as autocast casts it


class _Linear(torch.autograd.Function):
    """F.linear for training on CPU: the forward and the input's gradient through oneDNN
    (measured 7-10% faster than MKL in fp32 on bert-base's projections at 2,048 tokens), the
    weight's gradient through MKL (as fast or faster there)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        g = grad.reshape(-1, grad.shape[-1])  # (N, out)
        if torch.is_grad_enabled():  # create_graph=True: autograd's ops, differentiable again
            g_x = grad @ weight if need[0] else None
        else:
            g_x = linear(g, weight.t()).view(x.shape) if need[0] else None
        g_w = g.t().mm(x.reshape(-1, x.shape[-1])) if need[1] else None  # (out, in)
        g_b = g.sum(0) if ctx.has_bias and need[2] else None  # (out,)
        return g_x, g_w, g_b
