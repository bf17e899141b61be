"""The operations of BERT, each with its backward pass written by hand right under its forward.

Every op is a small object: `forward` computes the output and keeps what the gradient will need
(the cache), `backward` takes the gradient of the loss with respect to the output and returns the
gradient with respect to the input, adding the gradients of its parameters into `grads` (added,
not assigned: gradient accumulation over micro-batches and tied weights both come for free).
`release` drops the cache, which is how activation recomputation frees memory (model.py).

Parameters live in one flat dict of arrays shared by the whole model, looked up by name on every
call, so loading weights or stepping the optimizer never leaves an op holding a stale array.

Dimension legend:
    B batch, T sequence length, H hidden size, N attention heads, D head size (H = N * D),
    F intermediate (feed-forward) size, V vocabulary, K predicted (masked) positions,
    M any number of rows (the leading dimensions of an input flattened together).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

Arrays = dict[str, np.ndarray]


class Op:
    """Base: an op with a cache, the attributes named in `_cache`. `release` empties it (the op
    can run forward again)."""

    _cache: tuple[str, ...] = ()

    def release(self) -> None:
        self.__dict__.update({k: None for k in self._cache})


class Linear(Op):
    """y = x W^T + b, W of shape (out, in) as torch and Hugging Face store it.

    Backward: dW = dy^T x, db = sum of dy over rows, dx = dy W. The weight is named, not owned,
    so the MLM decoder can be a Linear whose weight is the word-embedding table (tied weights,
    Press & Wolf, 2017): both uses add their gradient into the same entry of `grads`.
    """

    _cache = ("x",)

    def __init__(self, params: Arrays, grads: Arrays, weight: str, bias: str | None):
        self.params, self.grads, self.weight, self.bias = params, grads, weight, bias
        self.x = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        w = self.params[self.weight]                 # (O, I)
        x2 = x.reshape(-1, x.shape[-1])              # (M, I): one GEMM instead of one per batch row
        self.x = x2
        y = x2 @ w.T                                 # (M, O)
        if self.bias is not None:
            y += self.params[self.bias]
        return y.reshape(*x.shape[:-1], w.shape[0])  # (..., O)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        w = self.params[self.weight]                 # (O, I)
        dy2 = dy.reshape(-1, w.shape[0])             # (M, O)
        self.grads[self.weight] += dy2.T @ self.x    # (O, I)
        if self.bias is not None:
            self.grads[self.bias] += dy2.sum(axis=0)
        dx = dy2 @ w                                 # (M, I)
        return dx.reshape(*dy.shape[:-1], w.shape[1])  # (..., I)


class LayerNorm(Op):
    """y = (x - mean) / sqrt(var + eps) * gain + bias over the last axis (Ba et al., 2016).

    Backward, with xhat the normalized input and g = dy * gain:
        dx = (g - mean(g) - xhat * mean(g * xhat)) / sqrt(var + eps)
    The two means are the gradients through the mean and the variance of the row.
    """

    _cache = ("xhat", "rstd")

    def __init__(self, params: Arrays, grads: Arrays, name: str, eps: float):
        self.params, self.grads, self.name, self.eps = params, grads, name, eps
        self.xhat = self.rstd = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)                   # (..., 1)
        xc = x - mean
        var = np.mean(xc * xc, axis=-1, keepdims=True)          # (..., 1), biased as in the paper
        self.rstd = 1.0 / np.sqrt(var + self.eps)               # (..., 1)
        self.xhat = xc * self.rstd
        return self.xhat * self.params[self.name + ".weight"] + self.params[self.name + ".bias"]

    def backward(self, dy: np.ndarray) -> np.ndarray:
        xhat, H = self.xhat, self.xhat.shape[-1]
        self.grads[self.name + ".weight"] += (dy * xhat).reshape(-1, H).sum(axis=0)
        self.grads[self.name + ".bias"] += dy.reshape(-1, H).sum(axis=0)
        g = dy * self.params[self.name + ".weight"]
        dx = g - g.mean(axis=-1, keepdims=True)
        dx -= xhat * np.mean(g * xhat, axis=-1, keepdims=True)
        dx *= self.rstd
        return dx


# Abramowitz & Stegun (1964), formula 7.1.26: for z >= 0,
#     erfc(z) = (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) exp(-z^2) + e(z),  t = 1 / (1 + p z),
# with |e(z)| <= 1.5e-7 (the size of float32 rounding near 1).
AS_P = 0.3275911
AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def normal_cdf_pdf(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Phi(x) and phi(x), the standard normal CDF and density, elementwise.

    float64 (the precision for checking against torch and finite differences) uses scipy's erf:
    Phi(x) = (1 + erf(x / sqrt 2)) / 2, exact to rounding. scipy's erf is a scalar loop (about
    15 ns per element here, more than every matmul of a block together), so float32 uses the
    formula above, which vectorizes: with q = erfc(|x| / sqrt 2) / 2 = (polynomial in t) * phi
    * sqrt(2 pi), Phi(x) = 1 - q for x >= 0 and q for x < 0, to within 7.5e-8 of the exact
    value plus float32 rounding (tests/test_numpy_ref.py checks it against scipy)."""
    dtype = x.dtype.type
    pdf = np.square(x)
    pdf *= dtype(-0.5)
    np.exp(pdf, out=pdf)
    pdf *= dtype(1 / math.sqrt(2 * math.pi))          # phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    if x.dtype == np.float64:
        cdf = erf(x * (1 / math.sqrt(2)))
        cdf += 1
        cdf *= 0.5
        return cdf, pdf
    t = np.abs(x)
    t *= dtype(AS_P / math.sqrt(2))
    t += 1
    np.reciprocal(t, out=t)                           # t = 1 / (1 + p |x| / sqrt 2)
    q = t * dtype(AS_A[4])
    for a in AS_A[3::-1]:                             # Horner: (((a5 t + a4) t + a3) t + a2) t + a1
        q += dtype(a)
        q *= t
    q *= pdf
    q *= dtype(-0.5 * math.sqrt(2 * math.pi))         # -q, q = erfc(|x| / sqrt 2) / 2 the upper tail
    q += dtype(0.5)
    np.copysign(q, x, out=q)
    q += dtype(0.5)                                   # 1/2 + sign(x) (1/2 - q): 1 - q or q
    return q, pdf


class GELU(Op):
    """The exact GELU of BERT's release (Hendrycks & Gimpel, 2016): x * Phi(x), Phi the standard
    normal CDF. Derivative: Phi(x) + x * phi(x), phi the normal density; both are kept from the
    forward pass, so backward costs two multiplications and an addition."""

    _cache = ("x", "cdf", "pdf")

    def __init__(self):
        self.x = self.cdf = self.pdf = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.x = x
        self.cdf, self.pdf = normal_cdf_pdf(x)
        return x * self.cdf

    def backward(self, dy: np.ndarray) -> np.ndarray:
        slope = self.x * self.pdf
        slope += self.cdf                                   # Phi(x) + x phi(x)
        slope *= dy
        return slope


class Dropout(Op):
    """Zero each element with probability p and scale the survivors by 1 / (1 - p) (inverted
    dropout, Srivastava et al., 2014), so inference needs no rescaling. The mask comes from a
    generator the caller seeds: recomputing a block in backward draws the same mask again.
    Backward multiplies by the same mask."""

    _cache = ("mask",)

    def __init__(self, p: float):
        self.p = p
        self.mask = None

    def forward(self, x: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        if rng is None or self.p == 0.0:
            self.mask = None
            return x
        keep = rng.random(x.shape) >= self.p
        self.mask = keep.astype(x.dtype) / x.dtype.type(1.0 - self.p)
        return x * self.mask

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dy if self.mask is None else dy * self.mask


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; subtracting the row maximum keeps exp from overflowing and
    changes nothing mathematically. Masked scores of -inf give exact zeros."""
    e = scores - scores.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


class SelfAttention(Op):
    """Multi-head scaled dot-product self-attention (Vaswani et al., 2017, sec. 3.2.2):
        heads_n = softmax(Q_n K_n^T / sqrt(D) + mask) V_n,   out = concat(heads) W_o^T + b_o

    Backward of the attention core, with P the probabilities and dO the gradient of the heads:
        dV = P^T dO,  dP = dO V^T,
        dS = P * (dP - rowsum(dP * P))        (the softmax Jacobian applied row by row)
        dQ = dS K / sqrt(D),  dK = dS^T Q / sqrt(D)
    """

    _cache = ("q", "k", "v", "probs")

    def __init__(self, params: Arrays, grads: Arrays, name: str, num_heads: int, dropout: float):
        self.query = Linear(params, grads, f"{name}.query.weight", f"{name}.query.bias")
        self.key = Linear(params, grads, f"{name}.key.weight", f"{name}.key.bias")
        self.value = Linear(params, grads, f"{name}.value.weight", f"{name}.value.bias")
        self.out_proj = Linear(params, grads, f"{name}.out_proj.weight", f"{name}.out_proj.bias")
        self.dropout = Dropout(dropout)
        self.num_heads = num_heads
        self.q = self.k = self.v = self.probs = None

    def split_heads(self, x: np.ndarray) -> np.ndarray:
        B, T, H = x.shape
        return x.reshape(B, T, self.num_heads, H // self.num_heads).transpose(0, 2, 1, 3)  # (B, N, T, D)

    @staticmethod
    def merge_heads(x: np.ndarray) -> np.ndarray:
        B, N, T, D = x.shape
        return x.transpose(0, 2, 1, 3).reshape(B, T, N * D)  # (B, N, T, D) -> (B, T, H)

    def forward(self, x: np.ndarray, mask_bias: np.ndarray | None, rng=None) -> np.ndarray:
        """x (B, T, H); mask_bias (B, 1, 1, T): 0 where a key may be attended, -inf where not."""
        q = self.split_heads(self.query.forward(x))   # (B, N, T, D)
        k = self.split_heads(self.key.forward(x))     # (B, N, T, D)
        v = self.split_heads(self.value.forward(x))   # (B, N, T, D)
        scale = x.dtype.type(1 / math.sqrt(q.shape[-1]))
        scores = q @ k.transpose(0, 1, 3, 2)          # (B, N, T, T)
        scores *= scale
        if mask_bias is not None:
            scores += mask_bias                       # broadcast over heads and queries
        probs = softmax(scores)                       # (B, N, T, T)
        self.q, self.k, self.v, self.probs = q, k, v, probs
        heads = self.dropout.forward(probs, rng) @ v  # (B, N, T, D)
        return self.out_proj.forward(self.merge_heads(heads))  # (B, T, H)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        q, k, v, probs = self.q, self.k, self.v, self.probs
        scale = dy.dtype.type(1 / math.sqrt(q.shape[-1]))
        d_heads = self.split_heads(self.out_proj.backward(dy))      # (B, N, T, D)
        dropped = probs if self.dropout.mask is None else probs * self.dropout.mask
        dv = dropped.transpose(0, 1, 3, 2) @ d_heads                 # (B, N, T, D)
        dp = self.dropout.backward(d_heads @ v.transpose(0, 1, 3, 2))  # (B, N, T, T)
        ds = dp - np.sum(dp * probs, axis=-1, keepdims=True)
        ds *= probs                                                  # (B, N, T, T)
        ds *= scale
        dq = ds @ k                                                  # (B, N, T, D)
        dk = ds.transpose(0, 1, 3, 2) @ q                            # (B, N, T, D)
        dx = self.query.backward(self.merge_heads(dq))               # (B, T, H)
        dx += self.key.backward(self.merge_heads(dk))
        dx += self.value.backward(self.merge_heads(dv))
        return dx

    def release(self) -> None:
        super().release()
        for op in (self.query, self.key, self.value, self.out_proj, self.dropout):
            op.release()


class Embeddings(Op):
    """Word + position + token-type embeddings (BERT sec. 3.2, Fig. 2), then LayerNorm, dropout.

    An embedding lookup is a one-hot row times the table, so its backward adds each token's
    gradient into that token's row (np.add.at sums repeated ids). As in torch's
    nn.Embedding(padding_idx=...) and transformers, the padding row gets no gradient from the
    lookup (it may still get one through the tied MLM decoder).
    """

    _cache = ("ids", "types")

    def __init__(self, params: Arrays, grads: Arrays, name: str, eps: float, pad_token_id: int,
                 has_token_types: bool, dropout: float):
        self.params, self.grads, self.name = params, grads, name
        self.norm = LayerNorm(params, grads, f"{name}.norm", eps)
        self.dropout = Dropout(dropout)
        self.pad_token_id = pad_token_id
        self.has_token_types = has_token_types
        self.ids = self.types = None

    def forward(self, ids: np.ndarray, types: np.ndarray | None, rng=None) -> np.ndarray:
        T = ids.shape[1]
        x = self.params[self.name + ".word.weight"][ids]            # (B, T, H)
        x += self.params[self.name + ".position.weight"][:T]        # (T, H) broadcast over B
        if self.has_token_types:
            table = self.params[self.name + ".token_type.weight"]
            x += table[0] if types is None else table[types]        # segment A when not given
        self.ids, self.types = ids, types
        return self.dropout.forward(self.norm.forward(x), rng)

    def backward(self, dy: np.ndarray) -> None:
        dx = self.norm.backward(self.dropout.backward(dy))          # (B, T, H)
        H = dx.shape[-1]
        flat = dx.reshape(-1, H)                                    # (B*T, H)
        ids = self.ids.reshape(-1)                                  # (B*T,)
        real = ids != self.pad_token_id
        np.add.at(self.grads[self.name + ".word.weight"], ids[real], flat[real])
        self.grads[self.name + ".position.weight"][: dx.shape[1]] += dx.sum(axis=0)
        if self.has_token_types:
            g = self.grads[self.name + ".token_type.weight"]
            if self.types is None:
                g[0] += flat.sum(axis=0)
            else:
                np.add.at(g, self.types.reshape(-1), flat)

    def release(self) -> None:
        super().release()
        self.norm.release()
        self.dropout.release()


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of (K, V) logits against (K,) target ids, and its gradient:
        loss = mean_k (logsumexp(z_k) - z_k[t_k]),   dloss/dz_k = (softmax(z_k) - onehot(t_k)) / K
    The log-sum-exp is taken after subtracting the row maximum (no overflow)."""
    K = logits.shape[0]
    shifted = logits - logits.max(axis=-1, keepdims=True)           # (K, V)
    log_z = np.log(np.exp(shifted).sum(axis=-1))                    # (K,)
    rows = np.arange(K)
    loss = float(np.mean(log_z - shifted[rows, targets]))
    grad = softmax(shifted)                                         # (K, V)
    grad[rows, targets] -= 1
    grad /= K
    return loss, grad
