"""Every registered preset, automatically: exact parameter counts against transformers, and a
forward pass of a shrunken copy."""

import pytest
import torch
import transformers

import bertkit
from bertkit import PRESETS  # the public name: importing it registers every family's presets
from bertkit.interop.hf import config_to_hf


def transformers_count(config, head=None) -> int:
    hf = config_to_hf(config, head)
    hf_config = transformers.AutoConfig.for_model(**hf)
    with torch.device("meta"):
        model = getattr(transformers, hf["architectures"][0])(hf_config)
    return model.num_parameters()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_parameter_count_equals_transformers(name):
    config = PRESETS[name].config
    with torch.device("meta"):
        ours = bertkit.build(name).num_parameters()
    assert ours == transformers_count(config)


def test_published_counts():
    with torch.device("meta"):
        assert bertkit.build("bert-base").num_parameters() == 109_482_240
        assert bertkit.build("mini-bert").num_parameters() == 2_957_568


@pytest.mark.parametrize("head", ["mlm", "pretraining", "classification", "token-classification", "qa"])
def test_head_parameter_counts_equal_transformers(head):
    config = PRESETS["mini-bert"].config
    with torch.device("meta"):
        ours = bertkit.build("mini-bert", head=head).num_parameters()
    assert ours == transformers_count(config, head)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_runs_when_shrunk(name):
    config = PRESETS[name].config
    small = config.replace(num_layers=1, vocab_size=128, max_positions=16, pad_token_id=min(config.pad_token_id, 127))
    model = bertkit.build(small, head="mlm").eval()
    out = model(torch.randint(1, 128, (2, 8)), torch.ones(2, 8, dtype=torch.long))
    assert out.logits.shape == (2, 8, 128) and torch.isfinite(out.logits).all()
