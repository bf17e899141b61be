"""The CUDA paths, checked on purpose on a machine with a GPU: `pytest -m cuda` (deselected by
default; where torch sees no CUDA device, every test here fails and says so). The same checks as
the CPU suite, on the device: parity with transformers, the unpadded path (varlen flash attention
in bf16) against the padded one, a training step against the CPU's, compiled against eager, and
the bench's CUDA timing and memory plumbing."""

import math

import pytest
import torch

import bertkit
from bertkit import bench
from bertkit.layers import attention, packing
from conftest import max_diff_on_real
from test_fast_path import FAMILY_PRESETS, batch, no_dropout, shrunk
from test_hf_parity import FAMILIES, TOL, assert_same, batch_for, hf_config, hf_model, reference_outputs

pytestmark = pytest.mark.cuda
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def exact_cuda_matmuls():
    """Fail (not skip) without a GPU; TF32 off, so fp32 results can be held to the CPU's 1e-4."""
    if not torch.cuda.is_available():
        pytest.fail("this test needs a CUDA device: run `pytest -m cuda` on a machine with a GPU")
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def on_cuda(*tensors):
    return [t.to(CUDA) for t in tensors]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_checkpoints_give_transformers_outputs_on_cuda(family, tmp_path):
    prefix, _, variants = FAMILIES[family]
    cls_name = prefix + "ForMaskedLM"
    config = hf_config(family, next(iter(variants)), cls_name)
    ref = hf_model(cls_name, config)
    ref.save_pretrained(tmp_path)
    ours = bertkit.from_pretrained(tmp_path).eval().to(CUDA)
    ids, mask, types = on_cuda(*batch_for(config))
    with torch.no_grad():
        out = ours(ids, mask, types)
    assert out.logits.is_cuda
    assert_same(out, reference_outputs(ref.to(CUDA), ids, mask, types), mask)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_unpadded_bf16_path_equals_padded_path_on_cuda(name, monkeypatch):
    """In bf16 on CUDA, plain attention runs varlen flash attention on the packed tokens (counted
    here); its output must match the padded path's within bf16 rounding."""
    model = shrunk(name).to(CUDA, torch.bfloat16)
    ids, mask = on_cuda(*batch(model.config.pad_token_id))
    calls = []
    if attention.varlen_attn is not None:
        real = attention.varlen_attn
        monkeypatch.setattr(attention, "varlen_attn", lambda *a, **k: calls.append(1) or real(*a, **k))
    with torch.no_grad():
        fast = model(ids, mask).last_hidden_state.float()
        model.backbone.unpad = False
        padded = model(ids, mask).last_hidden_state.float()
    layers = [model.backbone.encoder.layer_for(i).attn for i in range(model.config.num_layers)]
    varlen = [attention.varlen_attn is not None and a.plain_scores  # ModernBERT's local layers: if it takes windows
              and (a.window is None or attention.VARLEN_WINDOWS) for a in layers]
    assert len(calls) == sum(varlen)
    assert max_diff_on_real(fast, padded, mask) <= 3e-2 * padded.abs().max().item()


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_fp32_buckets_on_cuda_follow_the_attentions_cost(name, monkeypatch):
    """fp32 on CUDA builds length buckets (no varlen kernel): one bucket where attention does
    work of its own per bucket (DeBERTa's relative terms, ModernBERT's windows), the CUDA
    allowance elsewhere; the output equals the padded path's."""
    made, real = [], packing.Packing.from_mask.__func__
    monkeypatch.setattr(packing.Packing, "from_mask", classmethod(
        lambda cls, *a: made.append(real(cls, *a)) or made[-1]))
    model = shrunk(name).to(CUDA)
    ids, mask = on_cuda(*batch(model.config.pad_token_id))
    with torch.no_grad():
        fast = model(ids, mask).logits
        model.backbone.unpad = False
        padded = model(ids, mask).logits
    expected = math.inf if model.backbone.encoder.bucket_work else packing.CUDA_BUCKET_ALLOWANCE
    assert made and all(p.allowance == expected for p in made)
    assert max_diff_on_real(fast, padded, mask) <= TOL


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_masked_lm_training_step_on_cuda_equals_cpu(name):
    """Loss and every gradient of a sparse-MLM step, fp32, padded batch: CUDA against CPU."""
    ids, mask = batch(shrunk(name).config.pad_token_id)
    chosen = mask.bool() & (torch.rand(mask.shape, generator=torch.Generator().manual_seed(1)) < 0.4)
    results = []
    for device in (torch.device("cpu"), CUDA):
        model = no_dropout(shrunk(name).train()).to(device)
        logits = model(ids.to(device), mask.to(device), masked_positions=chosen.to(device)).logits
        loss = torch.nn.functional.cross_entropy(logits, ids[chosen].to(device))
        loss.backward()
        results.append((loss.item(), {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}))
    (cpu_loss, cpu_grads), (cuda_loss, cuda_grads) = results
    assert abs(cpu_loss - cuda_loss) <= TOL
    assert cpu_grads.keys() == cuda_grads.keys()
    for n, g in cpu_grads.items():
        assert (g - cuda_grads[n]).abs().max().item() <= TOL, n


def test_compiled_model_matches_eager_on_cuda():
    model, eager = shrunk("bert-base").to(CUDA), shrunk("bert-base").to(CUDA)
    model.compile(freeze=True)
    for lengths in ([11, 4, 7, 1], [9, 9, 2]):
        T = max(lengths)
        ids = torch.randint(3, 120, (len(lengths), T), device=CUDA)
        mask = (torch.arange(T, device=CUDA)[None] < torch.tensor(lengths, device=CUDA)[:, None]).long()
        with torch.inference_mode():
            assert max_diff_on_real(model(ids, mask).logits, eager(ids, mask).logits, mask) <= TOL


def test_bench_times_and_measures_memory_on_cuda():
    records = bench.run(True, 1, None, progress=lambda line: None, device="cuda")
    assert records and all(r.device.startswith("cuda") and r.ours > 0 and r.reference > 0 for r in records)
    assert all(r.max_abs_diff <= 1e-4 for r in records if r.dtype == "fp32")
    plain, checkpointed = bench.activation_memory("mini-bert", 8, 64, "tiny memory", device=CUDA)
    assert plain.ours > checkpointed.ours > 0 and plain.reference > 0
    assert torch.cuda.get_device_name(CUDA) in bench.machine(CUDA)


def test_embeddings_of_a_model_on_cuda_equal_the_cpus(minilm_dir, reviews):
    from bertkit.tasks.embedding import embed

    model = bertkit.from_pretrained(minilm_dir)
    on_cpu = embed(model, reviews[:8])
    on_gpu = embed(model.to(CUDA), reviews[:8])
    assert on_gpu.device.type == "cpu" and (on_cpu - on_gpu).abs().max().item() <= 1e-4


def test_fill_mask_with_a_model_on_cuda_equals_the_cpus(tokenizer):
    # its batches stayed on the CPU (an error against a model on CUDA), and so did its target ids
    from bertkit.tasks import fill_mask

    torch.manual_seed(0)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, num_layers=2, hidden_size=64,
                          num_heads=4, intermediate_size=128)
    model.tokenizer = tokenizer
    texts = ["a [MASK] film.", "the [MASK] was [MASK]."]
    for targets in (None, ["good", "bad"]):
        on_cpu = fill_mask(model, texts, top_k=2, targets=targets)
        on_gpu = fill_mask(model.to(CUDA), texts, top_k=2, targets=targets)
        model.to("cpu")
        assert [[p["id"] for p in r["predictions"]] for r in on_gpu] == [[p["id"] for p in r["predictions"]]
                                                                        for r in on_cpu]


def test_attention_maps_of_a_model_on_cuda_equal_the_cpus(tokenizer):
    # the explicit path's inputs stayed on the CPU beside a model on CUDA
    from bertkit.viz import attention_maps

    torch.manual_seed(0)
    model = bertkit.build("bert-base", vocab_size=tokenizer.vocab_size, num_layers=2, hidden_size=64, num_heads=4,
                          intermediate_size=128)
    model.tokenizer = tokenizer
    on_cpu = attention_maps(model, "a film about the sea").attentions
    on_gpu = attention_maps(model.to(CUDA), "a film about the sea").attentions
    assert abs(on_cpu - on_gpu).max() <= 1e-4
