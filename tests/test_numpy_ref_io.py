"""Checkpoints between the NumPy reference, bertkit's torch models and transformers; the
safetensors format read and written without the safetensors package."""

import json
import os
import time

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import bertkit
from bertkit import numpy_ref
from bertkit.config import PRESETS
from bertkit.errors import BertkitError
from bertkit.interop.hf import hf_state_dict
from bertkit.numpy_ref import hf_io
from bertkit.numpy_ref.model import parameter_shapes
from bertkit.numpy_ref.safetensors import SafetensorsFile, float32_to_bf16
from bertkit.numpy_ref.safetensors import save_file as np_save_file
from conftest import make_batch, randomize

SMALL = bertkit.EncoderConfig(vocab_size=50, hidden_size=24, num_layers=2, num_heads=3, intermediate_size=40,
                              max_positions=16, hidden_dropout=0.0, attention_dropout=0.0)


def batch(config, lengths=(9, 4)):
    ids, mask, _ = make_batch(config.vocab_size, 2, lengths=lengths)
    return ids, mask


# ---- safetensors --------------------------------------------------------------------------------

def test_reader_decodes_every_float_dtype_like_the_safetensors_package(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=g, dtype=torch.float64) * 100
    tensors = {"f64": x, "f32": x.float(), "f16": x.half(), "bf16": x.bfloat16(), "i64": torch.arange(6).view(2, 3)}
    save_file(tensors, str(tmp_path / "t.safetensors"))
    f = SafetensorsFile(tmp_path / "t.safetensors")
    for name, t in tensors.items():
        got = f.get(name)
        expected = t.float().numpy() if name == "bf16" else t.numpy()
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_writer_rounds_bf16_as_torch_does_and_the_package_reads_it(tmp_path):
    edge = np.array([1.0, 1.00390625, 1.005859375, 1.0029296875, -2.5e-39, 3.3895e38, 3.4e38,
                     np.inf, -np.inf, 0.0, -0.0], dtype=np.float32)  # ties, subnormal, overflow, zeros
    x = np.concatenate([edge, np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 1e3])
    expected = torch.from_numpy(x).bfloat16()
    assert np.array_equal(float32_to_bf16(x), expected.view(torch.int16).numpy().view(np.uint16))
    np_save_file({"x": x, "ids": np.arange(4)}, tmp_path / "w.safetensors", dtype="bfloat16", metadata={"format": "pt"})
    back = load_file(str(tmp_path / "w.safetensors"))
    assert back["x"].dtype == torch.bfloat16 and torch.equal(back["x"], expected)
    assert torch.equal(back["ids"], torch.arange(4))
    np_save_file({"x": x}, tmp_path / "f.safetensors")
    assert torch.equal(load_file(str(tmp_path / "f.safetensors"))["x"], torch.from_numpy(x))


def test_bf16_nan_stays_nan():
    bits = float32_to_bf16(np.array([np.nan, -np.nan], dtype=np.float32))
    assert np.isnan((bits.astype(np.uint32) << 16).view(np.float32)).all()


def test_corrupt_safetensors_is_a_one_line_error(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(BertkitError, match="header is not JSON"):
        SafetensorsFile(tmp_path / "bad.safetensors")
    (tmp_path / "short.safetensors").write_bytes(b"\xff" * 9)
    with pytest.raises(BertkitError, match="does not fit"):
        SafetensorsFile(tmp_path / "short.safetensors")
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    (tmp_path / "off.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    with pytest.raises(BertkitError, match="do not match"):
        SafetensorsFile(tmp_path / "off.safetensors").get("x")
    header = json.dumps({"w": {"dtype": "F32", "shape": [0, -5], "data_offsets": [0, 0]}}).encode()
    (tmp_path / "negative.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(BertkitError, match="has shape \\[0, -5\\]: sizes are whole numbers >= 0"):
        SafetensorsFile(tmp_path / "negative.safetensors").get("w")


# ---- checkpoints ----------------------------------------------------------------------------------

def test_name_table_and_presets_agree_with_the_torch_side():
    for config in (SMALL, SMALL.replace(tie_word_embeddings=False, type_vocab_size=0)):
        model = bertkit.build(config, head="mlm")
        ours = {n for n, _ in model.named_parameters()}
        assert ours == set(parameter_shapes(config))
        expected = set(hf_state_dict(model)) - {hf_io.DECODER_BIAS}
        assert {hf_io.to_hf(n) for n in ours} == expected
        assert all(hf_io.to_ours(hf_io.to_hf(n)) == n for n in ours)
    for name, config in numpy_ref.PRESETS.items():
        assert config == PRESETS[name].config, name


@pytest.mark.parametrize("config", [numpy_ref.PRESETS["mini-bert"], SMALL.replace(tie_word_embeddings=False)],
                         ids=["mini-bert", "small-untied"])
def test_loads_what_bertkit_saves(tmp_path, config):
    model = bertkit.build(config, head="mlm").eval()
    randomize(model, 1)
    model.save_pretrained(tmp_path)
    ref = numpy_ref.from_pretrained(tmp_path, dtype=np.float64)
    ids, mask = batch(config, lengths=(16, 7, 3))
    with torch.no_grad():
        expected = model.double()(ids, mask).logits.numpy()
    real = mask.bool().numpy()
    assert np.abs(ref.forward(ids.numpy(), mask.numpy())[real] - expected[real]).max() <= 1e-5


def test_saved_checkpoint_loads_in_bertkit_and_transformers(tmp_path):
    ref = numpy_ref.build(SMALL.replace(tie_word_embeddings=True), dtype=np.float64, seed=3)
    rng = np.random.default_rng(3)
    for v in ref.params.values():
        v += rng.standard_normal(v.shape) * 0.05
    killed = tmp_path / ".saving-killed"  # what a killed save left, two hours ago: removed, as bertkit's save does
    killed.mkdir(parents=True)
    os.utime(killed, (time.time() - 7200,) * 2)
    ref.save_pretrained(tmp_path, dtype="float64")
    assert not killed.exists()
    ids, mask = batch(SMALL)
    got = ref.forward(ids.numpy(), mask.numpy())
    real = mask.bool().numpy()

    ours = bertkit.from_pretrained(tmp_path)
    assert ours.head_kind == "mlm"
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "float64"  # as transformers writes it
    ref.save_pretrained(tmp_path / "half", dtype="bfloat16")
    assert json.loads((tmp_path / "half" / "config.json").read_text())["dtype"] == "bfloat16"
    ref.save_pretrained(tmp_path / "f16", dtype=np.float16)  # NumPy's own, as build() takes them (a traceback)
    assert json.loads((tmp_path / "f16" / "config.json").read_text())["dtype"] == "float16"
    with pytest.raises(BertkitError, match="unknown dtype 'int8'; choose one of bfloat16, float16, float32, float64"):
        ref.save_pretrained(tmp_path / "int", dtype=np.int8)
    assert not (tmp_path / "int").exists()  # refused before any folder is made
    theirs = transformers.BertForMaskedLM.from_pretrained(tmp_path, torch_dtype=torch.float64).eval()
    with torch.no_grad():
        theirs_logits = theirs(input_ids=ids, attention_mask=mask).logits.numpy()
        ours_logits = ours.double()(ids, mask).logits.numpy()
    assert np.abs(theirs_logits[real] - got[real]).max() <= 1e-10
    # bertkit loads into float32 parameters before .double(): float32 rounding of the weights
    assert np.abs(ours_logits[real] - got[real]).max() <= 1e-5


def test_loads_a_transformers_bf16_pretraining_checkpoint(tmp_path):
    """transformers' own file (BertForPreTraining: pooler and NSP tensors to ignore) in bfloat16."""
    hf_config = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=48, max_position_embeddings=20)
    theirs = transformers.BertForPreTraining(hf_config).eval()
    randomize(theirs, 2)
    theirs = theirs.to(torch.bfloat16)
    theirs.save_pretrained(tmp_path)
    assert {SafetensorsFile(tmp_path / "model.safetensors").dtype(k) for k in ("bert.pooler.dense.weight",
                                                                                 "cls.predictions.bias")} == {"BF16"}
    ref = numpy_ref.from_pretrained(tmp_path)
    assert ref.config.num_layers == 2 and ref.config.vocab_size == 60
    assert ref.params["backbone.embeddings.word.weight"].dtype == np.float32
    ids, mask = batch(ref.config)
    with torch.no_grad():  # the same bf16 values, computed in float32 on both sides
        expected = theirs.float()(input_ids=ids, attention_mask=mask).prediction_logits.numpy()
    real = mask.bool().numpy()
    assert np.abs(ref.forward(ids.numpy(), mask.numpy())[real] - expected[real]).max() <= 1e-4


def test_checkpoint_errors_are_one_line(tmp_path):
    model = bertkit.build(SMALL, head="mlm")
    model.save_pretrained(tmp_path / "ok")
    state = load_file(str(tmp_path / "ok" / "model.safetensors"))

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    torch.save(state, pickled / "pytorch_model.bin")
    with pytest.raises(BertkitError, match="needs torch to read"):
        numpy_ref.from_pretrained(pickled)

    def variant(name, config_change=None, state_change=None):
        d = tmp_path / name
        d.mkdir()
        config = json.loads((tmp_path / "ok" / "config.json").read_text())
        config.update(config_change or {})
        (d / "config.json").write_text(json.dumps(config))
        save_file(state_change(dict(state)) if state_change else state, str(d / "model.safetensors"))
        return d

    with pytest.raises(BertkitError, match="loads BERT"):
        numpy_ref.from_pretrained(variant("roberta", {"model_type": "roberta"}))
    with pytest.raises(BertkitError, match="float32 or float64, not bfloat16"):  # a name NumPy lacks
        numpy_ref.from_pretrained(tmp_path / "ok", dtype="bfloat16")
    taken = tmp_path / "taken.txt"
    taken.write_text("mine")
    with pytest.raises(BertkitError, match="taken.txt: a file, not a folder"):
        numpy_ref.from_pretrained(tmp_path / "ok").save_pretrained(taken)
    assert taken.read_text() == "mine"
    with pytest.raises(BertkitError, match="needs a masked-LM head"):
        numpy_ref.from_pretrained(variant("encoder", {"architectures": ["BertModel"]}))
    with pytest.raises(BertkitError, match="unexpected tensor 'extra'"):
        numpy_ref.from_pretrained(variant("extra", state_change=lambda s: {**s, "extra": torch.zeros(1)}))
    with pytest.raises(BertkitError, match="has shape"):
        numpy_ref.from_pretrained(variant("shape", {"intermediate_size": 41}))
    with pytest.raises(BertkitError, match="missing 2 tensor"):
        numpy_ref.from_pretrained(variant("missing", state_change=lambda s: {
            k: v for k, v in s.items() if not k.startswith("cls.predictions.transform.dense")}))
    with pytest.raises(BertkitError, match="no such directory"):
        numpy_ref.from_pretrained(tmp_path / "nowhere")
    # a shard index naming files outside the folder, or no file names: refused as the torch side refuses them
    for name, weight_map, said in (("climbing", {"w": "../ok/model.safetensors"}, "lies outside the model folder"),
                                   ("absolute", {"w": str(tmp_path / "ok" / "model.safetensors")}, "lies outside"),
                                   ("listed", {"w": ["a"]}, "weight_map must map tensor names to shard file names")):
        d = variant(name)
        (d / "model.safetensors").unlink()
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        with pytest.raises(BertkitError, match=said):
            numpy_ref.from_pretrained(d)


def test_a_model_is_saved_in_its_own_dtype_and_reads_transformers_gelu_python(tmp_path):
    """A float64 run's weights were written as float32 (5.9e-8 off on reloading); transformers'
    gelu_python is the erf GELU the reference computes, and was refused."""
    for dtype, kind in ((np.float64, "F64"), (np.float32, "F32")):
        ref = numpy_ref.build(SMALL, dtype=dtype, seed=4)
        ref.save_pretrained(tmp_path / kind)
        assert SafetensorsFile(tmp_path / kind / "model.safetensors").dtype("bert.embeddings.word_embeddings.weight") \
            == kind
        again = numpy_ref.from_pretrained(tmp_path / kind, dtype=dtype)
        assert all(np.array_equal(again.params[n], v) for n, v in ref.params.items())
    config = json.loads((tmp_path / "F64" / "config.json").read_text())
    (tmp_path / "F64" / "config.json").write_text(json.dumps({**config, "hidden_act": "gelu_python"}))
    ids, mask = batch(SMALL)
    theirs = transformers.BertForMaskedLM.from_pretrained(tmp_path / "F64", torch_dtype=torch.float64).eval()
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).logits.numpy()
    got = numpy_ref.from_pretrained(tmp_path / "F64", dtype=np.float64).forward(ids.numpy(), mask.numpy())
    real = mask.bool().numpy()
    assert np.abs(got[real] - expected[real]).max() <= 1e-10
    labels = np.full(ids.shape, -100.0)
    with pytest.raises(BertkitError, match="labels must be integer token ids"):
        numpy_ref.from_pretrained(tmp_path / "F64").forward_backward(ids.numpy(), mask.numpy(), labels)
