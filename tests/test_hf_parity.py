"""Parity with transformers itself: random-initialized reference models, tiny configs.

Every BERT class loads into bertkit with the same outputs (<= 1e-4 on non-pad positions), and a
bertkit model saved with save_pretrained loads back into transformers with the same outputs.
"""

import json
import warnings

import pytest
import torch
from torch import nn
import transformers
from safetensors.torch import load_file, save_file

import bertkit
from bertkit.errors import BertkitError
from bertkit.interop.hf import UnusedHeadWarning, load_state, read_weights
from conftest import make_batch, max_diff_on_real, randomize

TOL = 1e-4

HEAD_OF_SUFFIX = {
    "Model": None,
    "ForMaskedLM": "mlm",
    "ForPreTraining": "pretraining",
    "ForSequenceClassification": "classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "qa",
}
BASE = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=24)

# family -> (transformers class prefix, suffixes, config variants that vary what checkpoints vary)
FAMILIES = {
    "bert": ("Bert", ["Model", "ForMaskedLM", "ForPreTraining", "ForSequenceClassification",
                      "ForTokenClassification", "ForQuestionAnswering"], {
        "gelu-2types": dict(BASE, hidden_act="gelu", type_vocab_size=2, layer_norm_eps=1e-12),
        "gelu_new-3types": dict(BASE, hidden_act="gelu_new", type_vocab_size=3, layer_norm_eps=1e-5),
        "relu-1type": dict(BASE, hidden_act="relu", type_vocab_size=1, layer_norm_eps=1e-6),
    }),
    "roberta": ("Roberta", ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                            "ForQuestionAnswering"], {
        "pad1": dict(BASE, max_position_embeddings=26, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5),
        "pad0-gelu_new": dict(BASE, max_position_embeddings=26, type_vocab_size=1, pad_token_id=0,
                              hidden_act="gelu_new"),
    }),
    # XLM-R: RoBERTa's computation under its own model_type and class names, saved back as such
    "xlm-roberta": ("XLMRoberta", ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                                   "ForQuestionAnswering"], {
        "pad1-2types": dict(BASE, max_position_embeddings=26, type_vocab_size=2, pad_token_id=1, layer_norm_eps=1e-5),
    }),
    # CamemBERT: the same, under its own names
    "camembert": ("Camembert", ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                                "ForQuestionAnswering"], {
        "pad1-1type": dict(BASE, max_position_embeddings=26, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5),
    }),
    "albert": ("Albert", ["Model", "ForPreTraining", "ForMaskedLM", "ForSequenceClassification",
                          "ForTokenClassification", "ForQuestionAnswering"], {
        "one-shared-block": dict(BASE, embedding_size=16, num_hidden_layers=3),
        "2groups-x2inner": dict(BASE, embedding_size=16, num_hidden_layers=4, num_hidden_groups=2,
                                inner_group_num=2, hidden_act="relu"),
        "3groups-of-4": dict(BASE, embedding_size=32, num_hidden_layers=4, num_hidden_groups=3),
    }),
    "distilbert": ("DistilBert", ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                                  "ForQuestionAnswering"], {
        "learned": dict(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=24),
        "sinusoidal-relu": dict(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                                max_position_embeddings=24, sinusoidal_pos_embds=True, activation="relu"),
    }),
    "electra": ("Electra", ["Model", "ForPreTraining", "ForMaskedLM", "ForSequenceClassification",
                            "ForTokenClassification", "ForQuestionAnswering"], {
        # the multiple-choice head's sequence summary: its own activation, or no dense layer
        "E<H": dict(BASE, embedding_size=16, summary_activation="tanh"),
        "E=H-gelu_new": dict(BASE, embedding_size=32, hidden_act="gelu_new", type_vocab_size=3, summary_use_proj=False),
    }),
    "deberta-v2": ("DebertaV2", ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                                 "ForQuestionAnswering"], {
        # v3's shape: log buckets (T=9 > 8/2 reaches them), shared keys, normalized table ("a|b" lists, as
        # transformers reads it), new MLM layout
        # (which decodes with the word embeddings whatever tie_word_embeddings says)
        "v3-buckets-shared": dict(BASE, relative_attention=True, position_buckets=8, share_att_key=True,
                                  norm_rel_ebd="layer_norm|none", pos_att_type="p2c|c2p", position_biased_input=False,
                                  legacy=False, layer_norm_eps=1e-7, tie_word_embeddings=False),
        # c2p only, own projections, clamped distances, conv layer, absolute positions, E < H, legacy MLM
        "c2p-conv-absolute": dict(BASE, relative_attention=True, max_relative_positions=6, pos_att_type=["c2p"],
                                  share_att_key=False, conv_kernel_size=3, position_biased_input=True,
                                  type_vocab_size=2, embedding_size=16, legacy=True),
        # p2c only, buckets without the table norm, grouped conv
        "p2c-buckets-groupconv": dict(BASE, relative_attention=True, position_buckets=4, pos_att_type=["p2c"],
                                      share_att_key=False, norm_rel_ebd="none", conv_kernel_size=5, conv_groups=2,
                                      hidden_act="gelu_new", position_biased_input=False),
        # no relative attention: transformers still builds (and saves) the table's norm, unused
        "no-relative": dict(BASE, relative_attention=False, norm_rel_ebd="layer_norm", position_biased_input=True,
                            type_vocab_size=2),
    }),
    "deberta": ("Deberta", ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                            "ForQuestionAnswering"], {
        "both-clamped": dict(BASE, relative_attention=True, max_relative_positions=6, pos_att_type="c2p|p2c",
                             position_biased_input=False),
        "p2c-absolute-E<H": dict(BASE, relative_attention=True, pos_att_type=["p2c"], position_biased_input=True,
                                 embedding_size=16, type_vocab_size=2, hidden_act="gelu_new"),
        "c2p-new-mlm-layout": dict(BASE, relative_attention=True, pos_att_type=["c2p"], legacy=False),
    }),
    "modernbert": ("ModernBert", ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                                  "ForQuestionAnswering"], {
        # defaults: no biases, global every 3rd layer; a window of 2 either side (T = 9 reaches past it)
        "no-bias-window4": dict(BASE, num_hidden_layers=4, pad_token_id=0, local_attention=4),
        # every bias, mean pooling, other RoPE bases and activations, global every 2nd layer
        "biases-mean-rope": dict(BASE, num_hidden_layers=3, pad_token_id=0, local_attention=6, attention_bias=True,
                                 mlp_bias=True, norm_bias=True, classifier_bias=True, decoder_bias=False,
                                 classifier_pooling="mean", global_attn_every_n_layers=2, global_rope_theta=500.0,
                                 local_rope_theta=20.0, hidden_activation="gelu_new", classifier_activation="silu",
                                 norm_eps=1e-6),
        # layer types spelled out, starting local
        "layer-types": dict(BASE, num_hidden_layers=3, pad_token_id=2, local_attention=2,
                            layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
    }),
}
CASES = [(family, prefix + suffix, variant)
         for family, (prefix, suffixes, variants) in FAMILIES.items()
         for suffix in suffixes for variant in variants]
CLASSES = {prefix + suffix: HEAD_OF_SUFFIX[suffix]
           for prefix, suffixes, _ in FAMILIES.values() for suffix in suffixes}


def hf_config(family, variant, cls_name):
    kwargs = dict(FAMILIES[family][2][variant])
    # transformers sizes the QA layer by num_labels: it needs 2 (ALBERT's SOP layer follows it too)
    kwargs["num_labels"] = 2 if CLASSES[cls_name] == "qa" else 3
    return transformers.AutoConfig.for_model(family, **kwargs)


def tiny_hf_config(**kw):
    return transformers.BertConfig(**{**BASE, "num_labels": 3, **kw})


def hf_model(cls_name, config, seed=0):
    torch.manual_seed(seed)
    model = getattr(transformers, cls_name)(config)
    randomize(model, seed)
    return model.eval()


def batch_for(config, seed=0):
    types = getattr(config, "type_vocab_size", 0)
    return make_batch(config.vocab_size, types, seed=seed, pad_id=config.pad_token_id)


def call(model, ids, mask, types, **kw):
    """Run a transformers model; families without token types take none."""
    if getattr(model.config, "type_vocab_size", 0):
        kw["token_type_ids"] = types
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, **kw)


def reference_outputs(model, ids, mask, types):
    """Output tensors by our attribute names, from a transformers model."""
    out = call(model, ids, mask, types)
    named = {}
    if getattr(out, "last_hidden_state", None) is not None:
        named["last_hidden_state"] = out.last_hidden_state
    for theirs, ours in (("logits", "logits"), ("prediction_logits", "logits"),
                         ("seq_relationship_logits", "pair_logits"), ("sop_logits", "pair_logits"),
                         ("start_logits", "start_logits"), ("end_logits", "end_logits")):
        if getattr(out, theirs, None) is not None:
            named[ours] = getattr(out, theirs)
    return named


def hidden_state(model, ids, mask, types):
    """The encoder's last hidden state of any transformers head model."""
    return call(model.base_model, ids, mask, types).last_hidden_state


def assert_same(ours, ref: dict, mask):
    assert ref, "reference produced no outputs"
    for name, expected in ref.items():
        got = getattr(ours, name)
        assert got is not None, f"bertkit output has no {name}"
        diff = max_diff_on_real(got, expected, mask)
        assert diff <= TOL, f"{name}: max abs diff {diff:.2e}"


def _saved(model, path):
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize("family, cls_name, variant", CASES)
def test_transformers_checkpoint_loads_with_identical_outputs(family, cls_name, variant, tmp_path):
    config = hf_config(family, variant, cls_name)
    ref = hf_model(cls_name, config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    assert ours.config.family == family and ours.head_kind == CLASSES[cls_name]
    ids, mask, types = batch_for(config)
    with torch.no_grad():
        out = ours(ids, mask, types)
    assert_same(out, reference_outputs(ref, ids, mask, types), mask)
    assert max_diff_on_real(out.last_hidden_state, hidden_state(ref, ids, mask, types), mask) <= TOL
    pooled = getattr(call(ref.base_model, ids, mask, types), "pooler_output", None)
    if pooled is not None:
        assert (out.pooler_output - pooled).abs().max().item() <= TOL


@pytest.mark.parametrize("family, cls_name, variant",
                         [case for case in CASES if case[2] == list(FAMILIES[case[0]][2])[-1]])
def test_bertkit_save_loads_back_into_transformers(family, cls_name, variant, tmp_path):
    config = hf_config(family, variant, cls_name)
    ours = bertkit.from_pretrained(_saved(hf_model(cls_name, config, seed=3), tmp_path / "src"))
    randomize(ours, seed=7)  # new values, so a silently unsaved tensor cannot pass
    ours.save_pretrained(tmp_path / "out")
    ref, info = getattr(transformers, cls_name).from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info  # every tensor it builds, from the file
    ref.eval()
    ids, mask, types = batch_for(config, seed=5)
    with torch.no_grad():
        out = ours.eval()(ids, mask, types)
    assert_same(out, reference_outputs(ref, ids, mask, types), mask)
    # transformers' generic loader picks the same class from the config we wrote.
    assert transformers.AutoConfig.from_pretrained(tmp_path / "out").architectures == [cls_name]


def test_int_bool_and_missing_masks_match_transformers(tmp_path):
    config = tiny_hf_config()
    ref = hf_model("BertModel", config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    ids, mask, types = make_batch(config.vocab_size, 2)
    expected = reference_outputs(ref, ids, mask, types)["last_hidden_state"]
    for m in (mask, mask.bool()):
        got = ours(ids, m, types).last_hidden_state
        assert max_diff_on_real(got, expected, mask) <= TOL
    with torch.no_grad():
        no_mask = ref(input_ids=ids).last_hidden_state
    assert (ours(ids).last_hidden_state - no_mask).abs().max().item() <= TOL


def test_attentions_match_transformers_eager(tmp_path):
    config = tiny_hf_config()
    config._attn_implementation = "eager"
    ref = hf_model("BertModel", config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    ids, mask, types = make_batch(config.vocab_size, 2)
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask, token_type_ids=types, output_attentions=True).attentions
        mine = ours(ids, mask, types, output_attentions=True).attentions
    assert len(mine) == len(theirs) == config.num_hidden_layers
    for a, b in zip(mine, theirs):
        real_rows = mask.bool()[:, None, :, None] & mask.bool()[:, None, None, :]
        assert (a - b).abs().masked_select(real_rows).max().item() <= TOL


def test_untied_decoder_round_trips(tmp_path):
    config = tiny_hf_config(tie_word_embeddings=False)
    ref = hf_model("BertForMaskedLM", config)
    assert ref.cls.predictions.decoder.weight is not ref.bert.embeddings.word_embeddings.weight
    ours = bertkit.from_pretrained(_saved(ref, tmp_path / "a"))
    assert ours.head.decoder.weight is not ours.backbone.embeddings.word.weight
    ids, mask, types = make_batch(config.vocab_size, 2)
    assert_same(ours(ids, mask, types), reference_outputs(ref, ids, mask, types), mask)
    ours.save_pretrained(tmp_path / "b")
    back = transformers.BertForMaskedLM.from_pretrained(tmp_path / "b").eval()
    assert_same(ours(ids, mask, types), reference_outputs(back, ids, mask, types), mask)


# DeBERTa-v3's new MLM layout (legacy=False) has no decoder weight: it decodes with the embeddings.
MASKED_LM = [(family, next(v for v, kw in variants.items() if kw.get("legacy", True)))
             for family, (_, suffixes, variants) in FAMILIES.items() if "ForMaskedLM" in suffixes]


@pytest.mark.parametrize("family, variant", MASKED_LM)
def test_a_tied_decoder_stored_with_its_own_values_is_used_as_transformers_uses_it(family, variant, tmp_path):
    # The config ties the decoder to the word embeddings, but the file holds a decoder weight (and
    # a decoder bias beside the head's bias) with other values: transformers leaves those untied
    # and runs each as stored.
    from bertkit.interop.hf_names import FAMILIES as SPECS

    cls_name = FAMILIES[family][0] + "ForMaskedLM"
    config = hf_config(family, variant, cls_name)
    config.tie_word_embeddings = True  # DeBERTa-v2's config does not tie by default
    ref = hf_model(cls_name, config)
    decoder = next(n for n, m in ref.named_modules() if m is ref.get_output_embeddings())
    ref.save_pretrained(tmp_path / "a")
    state = load_file(tmp_path / "a" / "model.safetensors")
    generator = torch.Generator().manual_seed(1)
    state[decoder + ".weight"] = torch.randn(ref.get_output_embeddings().weight.shape, generator=generator)
    if SPECS[family].tied_bias:
        for name in SPECS[family].tied_bias:
            state[name] = torch.randn(config.vocab_size, generator=generator)
    save_file(state, tmp_path / "a" / "model.safetensors")
    with pytest.warns(UserWarning, match="loaded untied"):
        ours = bertkit.from_pretrained(tmp_path / "a")
    ref = getattr(transformers, cls_name).from_pretrained(tmp_path / "a").eval()
    ids, mask, types = batch_for(config)
    assert_same(ours(ids, mask, types), reference_outputs(ref, ids, mask, types), mask)
    ours.save_pretrained(tmp_path / "b")
    back = getattr(transformers, cls_name).from_pretrained(tmp_path / "b").eval()
    assert_same(ours(ids, mask, types), reference_outputs(back, ids, mask, types), mask)


def sharing(model):
    """Parameter names grouped by the tensor they are: tied and shared weights form groups."""
    groups = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return sorted(tuple(names) for names in groups.values())


@pytest.mark.parametrize("family", list(FAMILIES))
def test_loading_skips_initialization_but_not_ties_shares_or_frozen_weights(family, tmp_path):
    """from_pretrained builds on the meta device and takes the file's tensors: the result must be
    the model that building and copying gives, tensor for tensor, with the same tied decoder,
    ALBERT's shared blocks, DistilBERT's frozen sinusoidal positions, and nothing left on meta."""
    prefix, _, variants = FAMILIES[family]
    variant = list(variants)[-1]
    config = hf_config(family, variant, prefix + "ForMaskedLM")
    path = _saved(hf_model(prefix + "ForMaskedLM", config), tmp_path)
    loaded = bertkit.from_pretrained(path)
    built = bertkit.build(loaded.config, head=loaded.head_kind)
    state, weights = read_weights(path)
    load_state(built, state, weights, head_from_file=True)
    assert sharing(loaded) == sharing(built)
    assert len(sharing(loaded)) < len(list(loaded.named_parameters(remove_duplicate=False)))  # a tie is there
    for (name, got), (_, expected) in zip(loaded.named_parameters(), built.named_parameters(), strict=True):
        assert not got.is_meta and got.is_contiguous(), name
        assert got.requires_grad == expected.requires_grad, name
        assert torch.equal(got, expected), name
    assert not any(b.is_meta for b in loaded.buffers())


def test_pytorch_bin_checkpoint_with_extras_loads(tmp_path):
    """Real files carry extras: position_ids buffers, a pooler and NSP head inside a masked-LM file,
    old gamma/beta LayerNorm names, keys without the `bert.` prefix."""
    config = tiny_hf_config()
    full = hf_model("BertForPreTraining", config)
    state = {k: v.clone() for k, v in full.state_dict().items()}
    state["bert.embeddings.position_ids"] = torch.arange(24)[None]
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in state.items()}
    state = {k.removeprefix("bert."): v for k, v in state.items()}
    config.architectures = ["BertForMaskedLM"]
    config.save_pretrained(tmp_path)
    torch.save(state, tmp_path / "pytorch_model.bin")
    ours = bertkit.from_pretrained(tmp_path)
    assert ours.head_kind == "mlm" and ours.backbone.pooler is None
    ids, mask, types = make_batch(config.vocab_size, 2)
    with torch.no_grad():
        expected = full(input_ids=ids, attention_mask=mask, token_type_ids=types).prediction_logits
    assert max_diff_on_real(ours(ids, mask, types).logits, expected, mask) <= TOL


def test_head_override_initializes_only_the_new_head(tmp_path):
    ref = hf_model("BertModel", tiny_hf_config())
    with pytest.warns(UserWarning, match="freshly initialized"):
        ours = bertkit.from_pretrained(_saved(ref, tmp_path), head="classification", num_labels=5)
    assert ours.head.classifier.out_features == 5
    ids, mask, types = make_batch(99, 2)
    expected = reference_outputs(ref, ids, mask, types)["last_hidden_state"]
    assert max_diff_on_real(ours(ids, mask, types).last_hidden_state, expected, mask) <= TOL


def test_a_classifier_on_a_masked_lm_checkpoint_gets_a_fresh_pooler_as_in_transformers(tmp_path):
    """BertForMaskedLM has no pooler, and that is what pre-training saves; fine-tuning a classifier
    on it must start from its encoder with a new pooler, as transformers does, not fail."""
    mlm = hf_model("BertForMaskedLM", tiny_hf_config())
    path = _saved(mlm, tmp_path)
    with pytest.warns(UserWarning, match="pooler.dense.weight"):
        ours = bertkit.from_pretrained(path, head="classification", num_labels=3)
    ref = transformers.BertModel.from_pretrained(path, add_pooling_layer=False).eval()
    ids, mask, types = make_batch(99, 2)
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    assert max_diff_on_real(ours(ids, mask, types).last_hidden_state, expected, mask) <= TOL
    tensors = load_file(path / "model.safetensors")
    del tensors[next(k for k in tensors if k.endswith("attention.self.query.weight"))]
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(BertkitError, match="missing 1 tensor"):  # any other encoder tensor must be there
        bertkit.from_pretrained(path, head="classification", num_labels=3)


@pytest.mark.parametrize("problem_type", [None, "single_label_classification", "multi_label_classification",
                                          "regression"])
def test_a_classifier_saved_back_keeps_its_problem_type_and_so_its_loss_in_transformers(problem_type, tmp_path):
    """problem_type decides transformers' loss (and how pipelines read the outputs): a 3-output
    regression model without it would be trained with binary cross-entropy."""
    ref = hf_model("BertForSequenceClassification", tiny_hf_config(problem_type=problem_type))
    ours = bertkit.from_pretrained(_saved(ref, tmp_path / "src"))
    assert ours.config.problem_type == problem_type
    ours.save_pretrained(tmp_path / "out")
    back = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "out").eval()
    assert back.config.problem_type == problem_type
    ids, mask, types = make_batch(99, 2)
    real_valued = problem_type in ("regression", "multi_label_classification")
    labels = torch.rand(3, 3) if real_valued else torch.tensor([0, 2, 1])  # (B, C) or (B,)
    with torch.no_grad():
        before = ref(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels).loss
        after = back(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels).loss
    assert abs(before.item() - after.item()) <= TOL
    with pytest.raises(BertkitError, match="problem_type must be one of"):
        ours.config.replace(problem_type="multi_label")


def test_a_file_that_names_no_architecture_loads_as_the_encoder_with_a_fresh_pooler(tmp_path):
    """config.json without `architectures` (DeBERTa-v3's release has none) means the bare encoder;
    when the file is a masked LM, the encoder's pooler is not in it and starts fresh, as
    transformers' AutoModel does. A file that names a head must still hold it."""
    mlm = hf_model("BertForMaskedLM", tiny_hf_config())
    path = _saved(mlm, tmp_path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "architectures"}))
    with pytest.warns(UserWarning, match="pooler.dense.weight"):
        # the file's MLM head is not used, and that is said, with the head= that would load it
        with pytest.warns(UnusedHeadWarning, match=r"5 tensor\(s\) .* cls\.predictions\.bias.*head='mlm'"):
            ours = bertkit.from_pretrained(path)
    assert ours.head_kind is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnusedHeadWarning)
        bertkit.from_pretrained(path, head=None)  # asked for: nothing to say
        assert bertkit.from_pretrained(path, head="mlm").head_kind == "mlm"
    ref = transformers.BertModel.from_pretrained(path, add_pooling_layer=False).eval()
    ids, mask, types = make_batch(99, 2)
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    assert max_diff_on_real(ours(ids, mask, types).last_hidden_state, expected, mask) <= TOL
    (path / "config.json").write_text(json.dumps({**config, "architectures": ["BertForSequenceClassification"]}))
    with pytest.raises(BertkitError, match="missing 4 tensor.* of the head config.json's architectures name; "
                       r"from_pretrained\(\.\.\., head='classification'\) starts it fresh$"):  # pooler and classifier
        bertkit.from_pretrained(path)
    assert bertkit.from_pretrained(path, head="classification").head_kind == "classification"  # as it says


def test_a_classifier_re_headed_for_another_label_count_keeps_its_encoder(tmp_path):
    """A 2-label classifier fine-tuned again for 3 labels: encoder and pooler load, the classifier
    (another shape) starts fresh with a warning naming it; read from the file as it is, the same
    checkpoint must still match exactly, and an encoder tensor of the wrong shape is still an error.
    Giving num_labels without head= asks for the same (transformers would want
    ignore_mismatched_sizes=True; the label count given is the request)."""
    ref = hf_model("BertForSequenceClassification", tiny_hf_config(num_labels=2))
    path = _saved(ref, tmp_path)
    with pytest.warns(UserWarning, match="head.classifier.weight"):
        ours = bertkit.from_pretrained(path, head="classification", num_labels=3)
    assert ours.head.classifier.out_features == 3
    ids, mask, types = make_batch(99, 2)
    with torch.no_grad():
        expected = ref.bert(input_ids=ids, attention_mask=mask, token_type_ids=types)
    out = ours(ids, mask, types)
    assert max_diff_on_real(out.last_hidden_state, expected.last_hidden_state, mask) <= TOL
    assert (out.pooler_output - expected.pooler_output).abs().max().item() <= TOL
    with pytest.warns(UserWarning, match="head.classifier.weight"):  # num_labels alone asks for the same
        assert bertkit.from_pretrained(path, num_labels=3).head.classifier.out_features == 3
    assert bertkit.from_pretrained(path).head.classifier.out_features == 2  # read as it is: the file's head
    tensors = load_file(path / "model.safetensors")
    name = next(k for k in tensors if k.endswith("attention.self.query.bias"))
    tensors[name] = tensors[name][:-1]
    save_file(tensors, path / "model.safetensors")
    with pytest.raises(BertkitError, match="has shape"):
        bertkit.from_pretrained(path, head="classification", num_labels=3)


def test_label_names_survive_a_round_trip(tmp_path):
    config = tiny_hf_config(id2label={0: "neg", 1: "neutral", 2: "pos"})
    ours = bertkit.from_pretrained(_saved(hf_model("BertForSequenceClassification", config), tmp_path / "a"))
    assert ours.config.labels == ("neg", "neutral", "pos")
    ours.save_pretrained(tmp_path / "b")
    back = transformers.AutoConfig.from_pretrained(tmp_path / "b")
    assert back.id2label == {0: "neg", 1: "neutral", 2: "pos"}


def test_a_class_name_of_another_family_gives_the_head_its_ending_names(tmp_path):
    # model_type decides the computation; XLMRobertaForMaskedLM over a roberta config is a masked
    # LM, as transformers' AutoModelForMaskedLM reads it. A head bertkit lacks is still refused.
    config = transformers.RobertaConfig(**{**BASE, "pad_token_id": 1, "max_position_embeddings": 30})
    ref = hf_model("RobertaForMaskedLM", config)
    path = _saved(ref, tmp_path)
    hf = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**hf, "architectures": ["XLMRobertaForMaskedLM"]}))
    ids, mask, types = make_batch(99, 0, pad_id=1)
    assert_same(bertkit.from_pretrained(path)(ids, mask), reference_outputs(ref, ids, mask, types), mask)
    (path / "config.json").write_text(json.dumps({**hf, "architectures": ["XLMRobertaForCausalLM"]}))
    with pytest.raises(BertkitError, match="'XLMRobertaForCausalLM' is not supported"):
        bertkit.from_pretrained(path)


def test_config_entries_for_other_tools_and_the_dtype_survive_a_round_trip(tmp_path):
    # Entries the encoder does not read (special-token ids, the fine-tuning task, ModernBERT's
    # sparse_prediction, a user's own) come back as the file had them, as transformers keeps every
    # entry of a config it loads; the config says the stored dtype, and a model re-headed for
    # another label count says its own labels.
    config = tiny_hf_config(bos_token_id=5, eos_token_id=6, sep_token_id=7, finetuning_task="sst2",
                            my_setting={"threshold": 0.3}, output_hidden_states=True,
                            problem_type="single_label_classification")
    ours = bertkit.from_pretrained(_saved(hf_model("BertForSequenceClassification", config), tmp_path / "a"))
    ours.to(torch.bfloat16).save_pretrained(tmp_path / "b")
    back = transformers.AutoConfig.from_pretrained(tmp_path / "b")
    assert (back.bos_token_id, back.eos_token_id, back.sep_token_id, back.finetuning_task) == (5, 6, 7, "sst2")
    assert back.my_setting == {"threshold": 0.3} and back.output_hidden_states
    assert back.dtype == torch.bfloat16
    bertkit.from_pretrained(tmp_path / "a", num_labels=5).save_pretrained(tmp_path / "relabelled")
    back = transformers.AutoConfig.from_pretrained(tmp_path / "relabelled")
    assert back.num_labels == 5 and len(back.label2id) == 5 and back.my_setting == {"threshold": 0.3}
    modern = transformers.ModernBertConfig(**{**BASE, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                                              "cls_token_id": 1, "sep_token_id": 2, "sparse_prediction": True})
    ours = bertkit.from_pretrained(_saved(hf_model("ModernBertForMaskedLM", modern), tmp_path / "c"))
    ours.save_pretrained(tmp_path / "d")
    back = transformers.AutoConfig.from_pretrained(tmp_path / "d")
    assert back.sparse_prediction and (back.cls_token_id, back.sep_token_id) == (1, 2) and back.dtype == torch.float32


def test_a_save_over_another_models_weights_leaves_none_of_them_behind(tmp_path):
    old = hf_model("BertForMaskedLM", tiny_hf_config(), seed=1)
    old.save_pretrained(tmp_path, max_shard_size="20KB")  # shards and their index
    torch.save(old.state_dict(), tmp_path / "pytorch_model.bin")  # and the older format
    (tmp_path / "notes.txt").write_text("mine")
    assert (tmp_path / "model.safetensors.index.json").exists() and (tmp_path / "pytorch_model.bin").exists()
    new = bertkit.from_pretrained(_saved(hf_model("BertForMaskedLM", tiny_hf_config(), seed=2), tmp_path / "src"))
    new.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.bin")) == [] and not list(tmp_path.glob("*.index.json"))
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["model.safetensors"]
    assert (tmp_path / "notes.txt").read_text() == "mine"  # only weights of another layout go
    ref = transformers.BertForMaskedLM.from_pretrained(tmp_path)
    ids, mask, types = make_batch(99, 2)
    with torch.no_grad():
        assert_same(new.eval()(ids, mask, types), reference_outputs(ref.eval(), ids, mask, types), mask)


def test_sharded_safetensors_checkpoint_loads(tmp_path):
    ref = hf_model("BertForMaskedLM", tiny_hf_config())
    ref.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    ours = bertkit.from_pretrained(tmp_path)
    ids, mask, types = make_batch(99, 2)
    assert_same(ours(ids, mask, types), reference_outputs(ref, ids, mask, types), mask)


def test_a_checkpoint_with_only_slow_tokenizer_files_loads_its_tokenizer(tmp_path):
    """Many RoBERTa checkpoints ship vocab.json + merges.txt and no tokenizer.json: the model must
    come with the tokenizer transformers would use, not without one."""
    from tokenizers import ByteLevelBPETokenizer

    texts = ["The film was good.", "A dull, long film.", "Good acting, weak story."] * 20
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(tmp_path))
    ref = hf_model("RobertaForMaskedLM", transformers.RobertaConfig(**{**BASE, "vocab_size": 300, "pad_token_id": 1}))
    ref.save_pretrained(tmp_path)
    assert not (tmp_path / "tokenizer.json").exists()
    ours = bertkit.from_pretrained(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert ours.tokenizer is not None
    for text in ("The film was good.", "weak acting, dull story", " leading space"):
        assert ours.tokenizer.encode(text) == theirs.encode(text), text


def test_bf16_load_runs_close_to_fp32(tmp_path):
    ref = hf_model("BertForSequenceClassification", tiny_hf_config())
    path = _saved(ref, tmp_path)
    fp32 = bertkit.from_pretrained(path)
    bf16 = bertkit.from_pretrained(path, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in bf16.parameters())
    ids, mask, types = make_batch(99, 2)
    with torch.no_grad():
        a = fp32(ids, mask, types).logits
        b = bf16(ids, mask, types).logits.float()
    assert (a - b).abs().max().item() <= 0.05 * a.abs().max().item() + 0.05


def test_dtype_auto_keeps_the_files_dtype_as_transformers_does(tmp_path):
    """dtype="auto": config.json's dtype, else the tensors' (transformers 5's default); the
    default stays float32. The weights are the file's exactly."""
    ref = hf_model("BertForSequenceClassification", tiny_hf_config()).to(torch.bfloat16)
    path = _saved(ref, tmp_path)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(path).eval()
    ours = bertkit.from_pretrained(path, dtype="auto")
    assert theirs.dtype == torch.bfloat16 and {p.dtype for p in ours.parameters()} == {torch.bfloat16}
    assert torch.equal(ours.head.classifier.weight, theirs.classifier.weight)
    assert {p.dtype for p in bertkit.from_pretrained(path).parameters()} == {torch.float32}
    config = json.loads((path / "config.json").read_text())
    config.pop("dtype", None), config.pop("torch_dtype", None)
    (path / "config.json").write_text(json.dumps(config))  # no dtype named: the tensors tell
    assert {p.dtype for p in bertkit.from_pretrained(path, dtype="auto").parameters()} == {torch.bfloat16}
    runnable = "must be float32, float64, float16 or bfloat16"
    for stored in ("int8", "float8_e4m3fn"):  # float8 loaded, then failed in the first forward (torch's error)
        (path / "config.json").write_text(json.dumps({**config, "torch_dtype": stored}))
        with pytest.raises(BertkitError, match=f"config.json: dtype {runnable}, got '{stored}'$"):
            bertkit.from_pretrained(path, dtype="auto")
    for asked in ("float12", torch.float8_e5m2, "float8_e4m3fn", torch.int8, torch.Tensor):
        with pytest.raises(BertkitError, match=f"^dtype {runnable} \\(a torch dtype or its name\\), or \"auto\", got "):
            bertkit.from_pretrained(path, dtype=asked)
    (path / "config.json").write_text(json.dumps(config))  # no dtype named, and float8 tensors: the file is named
    tensors = load_file(path / "model.safetensors")
    save_file({k: v.to(torch.float8_e4m3fn) if v.is_floating_point() else v
               for k, v in tensors.items()}, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(BertkitError, match=f"model.safetensors: the tensors' dtype {runnable} \\(load it with "
                                           'dtype="float32"\\), got torch.float8_e4m3fn$'):
        bertkit.from_pretrained(path, dtype="auto")
    assert bertkit.from_pretrained(path).dtype == torch.float32  # as it says
    assert bertkit.from_pretrained(path, dtype="half").dtype == torch.float16  # torch's names, as transformers takes them


def left_padded(*batch):
    """The same right-padded (ids, mask, types) batch with each row's padding moved to the front."""
    lengths = [int(n) for n in batch[1].sum(1)]
    return tuple(torch.stack([torch.cat([row[n:], row[:n]]) for row, n in zip(t, lengths)]) for t in batch)


LEFT_PADDED = [(family, variant) for family, (_, _, variants) in FAMILIES.items() for variant in variants]


@pytest.mark.parametrize("family, variant", LEFT_PADDED)
def test_a_classifier_on_a_left_padded_batch_reads_its_first_position_as_transformers_does(family, variant,
                                                                                            tmp_path):
    """Left padding puts a pad where a sequence classifier reads ([CLS]'s place): transformers
    reads that pad's state, which the packed stream does not hold. The padded computation gives
    it what transformers gives it (a pad query attending to the real tokens; DeBERTa's to every
    position alike; ModernBERT's to nothing in a local layer far from every real token), so the
    logits match, and the real tokens' states with them. ModernBERT's mean pooling reads none."""
    cls_name = FAMILIES[family][0] + "ForSequenceClassification"
    config = hf_config(family, variant, cls_name)
    ref = hf_model(cls_name, config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    ids, mask, types = left_padded(*batch_for(config))
    assert not mask[:, 0].all()
    assert_same(ours(ids, mask, types), reference_outputs(ref, ids, mask, types), mask)


@pytest.mark.parametrize("family, variant", LEFT_PADDED)
def test_the_padded_computation_gives_pad_positions_what_transformers_gives_them(family, variant, tmp_path):
    """With unpad off, every position, padding included, holds transformers' state, for left and
    right padding; the default packed path holds zeros at right padding."""
    config = hf_config(family, variant, FAMILIES[family][0] + "Model")
    ref = hf_model(FAMILIES[family][0] + "Model", config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    right = batch_for(config)
    for side, (ids, mask, types) in (("right", right), ("left", left_padded(*right))):
        expected = reference_outputs(ref, ids, mask, types)["last_hidden_state"]
        ours.backbone.unpad = True
        with torch.no_grad():
            packed = ours(ids, mask, types).last_hidden_state
        ours.backbone.unpad = False
        with torch.no_grad():
            padded = ours(ids, mask, types).last_hidden_state
        assert (padded - expected).abs().max().item() <= TOL
        assert max_diff_on_real(packed, expected, mask) <= TOL
        if side == "right":  # (left padding under a pooler runs the padded computation: see above)
            assert packed[~mask.bool()].abs().max().item() == 0.0


@pytest.mark.parametrize("family, variant", LEFT_PADDED)
def test_a_mask_with_holes_gives_transformers_states_on_the_real_tokens(family, variant, tmp_path):
    """0s between 1s in a mask: the packed stream closes the hole, so a family whose attention
    reads distances from slots (DeBERTa) must not pack such a batch; every family matches."""
    config = hf_config(family, variant, FAMILIES[family][0] + "Model")
    ref = hf_model(FAMILIES[family][0] + "Model", config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    ids, mask, types = batch_for(config)
    mask[0, 3:5] = 0  # rows of 9 and 6 real tokens, each with a hole
    mask[1, 2] = 0
    expected = reference_outputs(ref, ids, mask, types)["last_hidden_state"]
    with torch.no_grad():
        got = ours(ids, mask, types).last_hidden_state
    assert max_diff_on_real(got, expected, mask) <= TOL


def test_roberta_left_padding_numbers_positions_from_the_first_real_token(tmp_path):
    """RoBERTa numbers real tokens from pad+1 whatever sits before them, so a left-padded batch
    must give the same real-token outputs as transformers (and as the unpadded sequence)."""
    config = hf_config("roberta", "pad1", "RobertaModel")
    ref = hf_model("RobertaModel", config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    ids, mask, types = batch_for(config)
    left_ids, left_mask, _ = left_padded(ids, mask, types)
    expected = reference_outputs(ref, left_ids, left_mask, types * 0)["last_hidden_state"]
    got = ours(left_ids, left_mask).last_hidden_state
    assert max_diff_on_real(got, expected, left_mask) <= TOL
    alone = ours(ids[1:2, : int(mask[1].sum())]).last_hidden_state[0]
    assert (got[1][left_mask[1].bool()] - alone).abs().max().item() <= TOL


def test_roberta_runs_a_batch_padded_past_its_table_whose_rows_fit(tmp_path):
    """Padding takes no position of RoBERTa's own, so a batch padded to a fixed width beyond the
    table runs as in transformers while every row's real tokens fit; a row that does not is refused."""
    config = transformers.RobertaConfig(**{**BASE, "pad_token_id": 1, "max_position_embeddings": 18})  # 16 usable
    ref = hf_model("RobertaModel", config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    ids = torch.randint(3, 99, (2, 24), generator=torch.Generator().manual_seed(0))
    mask = torch.zeros_like(ids)
    mask[0, :16], mask[1, :5] = 1, 1
    ids[mask == 0] = 1
    expected = reference_outputs(ref, ids, mask, ids * 0)["last_hidden_state"]
    assert max_diff_on_real(ours(ids, mask).last_hidden_state, expected, mask) <= TOL
    ids[0, 16] = 5
    with pytest.raises(BertkitError, match=r"a sequence of 17 tokens \(not counting padding\) exceeds the model's "
                                           r"maximum of 16 tokens"):
        ours(ids, mask)


@pytest.mark.parametrize("family, variant", LEFT_PADDED)
def test_position_ids_are_followed_as_transformers_follows_them(family, variant, tmp_path):
    """position_ids numbering each left-padded row from its first real token: the states match
    transformers' given the same position_ids, and a row reads as it does alone (a shifted row
    without them does not, in a family with a position table)."""
    cls_name = FAMILIES[family][0] + "Model"
    config = hf_config(family, variant, cls_name)
    ref = hf_model(cls_name, config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    right_ids, right_mask, right_types = batch_for(config)
    ids, mask, types = left_padded(right_ids, right_mask, right_types)
    roberta = family in ("roberta", "xlm-roberta", "camembert")
    offset = config.pad_token_id + 1 if roberta else 0  # fairseq numbers real tokens from pad + 1
    position_ids = (mask.cumsum(1) - 1).clamp(min=0) + offset
    expected = call(ref, ids, mask, types, position_ids=position_ids).last_hidden_state
    with torch.no_grad():
        got = ours(ids, mask, types, position_ids=position_ids).last_hidden_state
        as_right = ours(right_ids, right_mask, right_types).last_hidden_state
        unnumbered = ours(ids, mask, types).last_hidden_state
    assert max_diff_on_real(got, expected, mask) <= TOL
    assert (got[mask.bool()] - as_right[right_mask.bool()]).abs().max().item() <= TOL
    table = getattr(ours.backbone.embeddings, "position", None)
    if table is not None and not roberta:  # (RoBERTa numbers them so without position_ids)
        assert (unnumbered[mask.bool()] - as_right[right_mask.bool()]).abs().max().item() > 1e-3


def test_position_ids_of_the_wrong_shape_type_or_range_and_unfollowable_rotary_orders_are_refused(tmp_path):
    bert = bertkit.build("bert-base", num_layers=1, hidden_size=32, num_heads=4, intermediate_size=37,
                         vocab_size=99, max_positions=24)
    ids = torch.ones(2, 5, dtype=torch.long)
    for bad, message in ((torch.arange(5), "position_ids must be a \\(2, 5\\) or \\(1, 5\\) tensor of int64 or int32 "
                                           "positions, as input_ids; got shape \\(5,\\)"),
                         (torch.zeros(2, 5), "position_ids must be .* got shape \\(2, 5\\), torch.float32"),
                         (torch.full((1, 5), 24), "position_ids holds 24, outside the position table's 24 rows \\(0..23\\)"),
                         (torch.full((1, 5), -1), "position_ids holds -1, outside")):
        with pytest.raises(BertkitError, match=message):
            bert(ids, position_ids=bad)
    modern = bertkit.from_pretrained(_saved(hf_model("ModernBertModel", hf_config(
        "modernbert", "no-bias-window4", "ModernBertModel")), tmp_path))
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    shifted = torch.tensor([[9, 9, 0, 1, 2], [3, 4, 5, 6, 7]])  # a shift per row: changes nothing
    with torch.no_grad():
        assert torch.equal(modern(ids, mask, position_ids=shifted).last_hidden_state,
                           modern(ids, mask).last_hidden_state)
    with pytest.raises(BertkitError, match="position_ids must count up by one over each sequence's real tokens"):
        modern(ids, mask, position_ids=torch.tensor([[0, 0, 0, 2, 1], [0, 1, 2, 3, 4]]))


@pytest.mark.parametrize("family, cls_name, variant", [("bert", "BertModel", "gelu-2types"),
                                                       ("albert", "AlbertModel", "2groups-x2inner"),
                                                       ("deberta-v2", "DebertaV2Model", "c2p-conv-absolute"),
                                                       ("modernbert", "ModernBertForMaskedLM", "no-bias-window4")])
def test_hidden_states_match_transformers(family, cls_name, variant, tmp_path):
    config = hf_config(family, variant, cls_name)
    ref = hf_model(cls_name, config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path))
    ids, mask, types = batch_for(config)
    theirs = call(ref, ids, mask, types, output_hidden_states=True).hidden_states
    with torch.no_grad():
        mine = ours(ids, mask, types, output_hidden_states=True).hidden_states
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        assert max_diff_on_real(a, b, mask) <= TOL
    assert ours(ids, mask, types).hidden_states is None


MULTIPLE_CHOICE = [(family, variant) for family, (prefix, _, variants) in FAMILIES.items()
                   if hasattr(transformers, prefix + "ForMultipleChoice") for variant in variants]


def choice_batch(config, seed: int = 1):
    """Right-padded (ids, mask, token types) of 6 sequences: 2 contexts x 3 choices once viewed
    as (2, 3, T)."""
    return make_batch(config.vocab_size, getattr(config, "type_vocab_size", 0), (9, 6, 3, 8, 2, 5), seed=seed,
                      pad_id=config.pad_token_id)


@pytest.mark.parametrize("family, variant", MULTIPLE_CHOICE)
def test_a_multiple_choice_checkpoint_scores_each_choice_as_transformers_does(family, variant, tmp_path):
    """XxxForMultipleChoice loads as the "multiple-choice" head: (B, C, T) inputs, (B, C) logits
    equal to transformers' for right and left padding, and saved back, transformers reads it
    to the same logits."""
    cls_name = FAMILIES[family][0] + "ForMultipleChoice"
    config = transformers.AutoConfig.for_model(family, **FAMILIES[family][2][variant])
    ref = hf_model(cls_name, config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path / "src"))
    assert ours.head_kind == "multiple-choice"
    flat = choice_batch(config)
    for batch in (flat, left_padded(*flat)):
        ids, mask, types = (t.view(2, 3, -1) for t in batch)
        with torch.no_grad():
            got = ours(ids, mask, types).logits
        assert got.shape == (2, 3)
        assert (got - call(ref, ids, mask, types).logits).abs().max().item() <= TOL
    randomize(ours, seed=7)  # new values, so a silently unsaved tensor cannot pass
    ours.save_pretrained(tmp_path / "out")
    back = getattr(transformers, cls_name).from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        got = ours(ids, mask, types).logits
    assert (got - call(back, ids, mask, types).logits).abs().max().item() <= TOL


def test_multiple_choice_refuses_inputs_without_a_choice_axis_and_deberta_v1():
    model = bertkit.build("mini-bert", head="multiple-choice").eval()
    ids = torch.randint(5, 100, (2, 3, 7))
    assert model(ids).logits.shape == (2, 3)
    words = model.backbone.embeddings.word(ids)  # (2, 3, 7, E): inputs_embeds keep the choice axis too
    assert torch.allclose(model(None, inputs_embeds=words).logits, model(ids).logits, atol=1e-6)
    with pytest.raises(BertkitError, match=r"\(batch, choices, length\) input_ids.*shape \(2, 7\)"):
        model(ids[:, 0])
    with pytest.raises(BertkitError, match=r"attention_mask has shape \(2, 7\) but input_ids has \(2, 3, 7\)"):
        model(ids, torch.ones(2, 7))
    with pytest.raises(BertkitError, match="DeBERTa v1 has no multiple-choice head"):
        bertkit.build(bertkit.PRESETS["deberta-base"].config.replace(num_layers=1), head="multiple-choice")
    # ELECTRA's summary of the last position or of every position would read padding
    with pytest.raises(BertkitError, match="summary_type 'mean' is not supported"):
        bertkit.build(bertkit.PRESETS["electra-small"].config.replace(num_layers=1, summary_type="mean"),
                      head="multiple-choice")


def test_electras_multiple_choice_dropouts_are_the_files(tmp_path):
    """The sequence summary's dropout before and after its dense layer are its own settings
    (summary_first_dropout, summary_last_dropout), not the hidden dropout; they are saved back."""
    config = transformers.ElectraConfig(**BASE, summary_first_dropout=0.3, summary_last_dropout=0.2,
                                        hidden_dropout_prob=0.05)
    theirs = transformers.ElectraForMultipleChoice(config)
    theirs.save_pretrained(tmp_path / "in")
    ours = bertkit.from_pretrained(tmp_path / "in")
    summary = theirs.sequence_summary
    assert (ours.head.input_dropout.p, ours.head.dropout.p) == (summary.first_dropout.p, summary.last_dropout.p)
    ours.save_pretrained(tmp_path / "out")
    back = transformers.ElectraForMultipleChoice.from_pretrained(tmp_path / "out").sequence_summary
    assert (back.first_dropout.p, back.last_dropout.p) == (0.3, 0.2)
    assert transformers.ElectraForMultipleChoice(transformers.ElectraConfig(**BASE)).sequence_summary.last_dropout.p == \
        bertkit.build(bertkit.PRESETS["electra-small"].config, head="multiple-choice").head.dropout.p  # the defaults
    hf = json.loads((tmp_path / "in" / "config.json").read_text())
    (tmp_path / "in" / "config.json").write_text(json.dumps({**hf, "summary_type": "last"}))
    with pytest.raises(BertkitError, match=r"config\.json: config: summary_type 'last' is not supported"):
        bertkit.from_pretrained(tmp_path / "in")  # the file is named, as for every config error


@pytest.mark.parametrize("family, variant", [(f, next(iter(v[2]))) for f, v in FAMILIES.items()])
def test_inputs_embeds_give_transformers_outputs_and_input_gradients(family, variant, tmp_path):
    """Word vectors passed in place of ids (inputs_embeds): the same outputs as transformers given
    the same vectors, and the same gradients with respect to them (what attribution methods such
    as integrated gradients take)."""
    cls_name = FAMILIES[family][0] + "ForSequenceClassification"
    config = hf_config(family, variant, cls_name)
    ref = hf_model(cls_name, config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path)).eval()
    ids, mask, types = batch_for(config)
    words = ref.get_input_embeddings()(ids).detach()  # (B, T, E)
    theirs_in, mine_in = words.clone().requires_grad_(), words.clone().requires_grad_()
    kw = {"token_type_ids": types} if getattr(config, "type_vocab_size", 0) else {}
    theirs = ref(inputs_embeds=theirs_in, attention_mask=mask, **kw).logits
    mine = ours(inputs_embeds=mine_in, attention_mask=mask, token_type_ids=types if kw else None).logits  # by keyword
    assert (mine - theirs).abs().max().item() <= TOL
    with torch.no_grad():
        assert (ours(ids, mask, types if kw else None).logits - mine).abs().max().item() <= TOL
    theirs.sum().backward()
    mine.sum().backward()
    keep = mask.bool()
    assert (mine_in.grad[keep] - theirs_in.grad[keep]).abs().max().item() <= TOL


def test_inputs_embeds_refuses_ids_beside_it_and_the_wrong_width():
    model = bertkit.build("mini-bert").eval()
    ids = torch.randint(5, 100, (2, 7))
    words = model.backbone.embeddings.word(ids)
    with pytest.raises(BertkitError, match="give input_ids or inputs_embeds, not both"):
        model(ids, inputs_embeds=words)
    with pytest.raises(BertkitError, match=r"inputs_embeds must be \(batch, length, 192\).*got \(2, 7, 5\)"):
        model(None, inputs_embeds=torch.randn(2, 7, 5))
    with pytest.raises(BertkitError, match="inputs_embeds are torch.float64 but the model's weights are torch.float32"):
        model(None, inputs_embeds=words.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast runs mixed dtypes: allowed
        assert model(None, inputs_embeds=words.bfloat16()).last_hidden_state.shape == (2, 7, 192)


def test_outputs_index_and_key_as_transformers_outputs_do(minilm_dir):
    """out[0], out["logits"], keys() and to_tuple(), as code written against transformers uses them."""
    model = bertkit.from_pretrained(minilm_dir).eval()
    reference = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    batch = model.tokenizer(["An output read as a tuple.", "And by name."])
    with torch.no_grad():
        ours = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], output_hidden_states=True)
        theirs = reference(**batch, output_hidden_states=True)
    assert list(ours.keys()) == list(theirs.keys())  # last_hidden_state, pooler_output, hidden_states
    assert len(ours.to_tuple()) == len(theirs.to_tuple()) == 3  # (not bertkit's attention_mask attribute)
    assert [tuple(t.shape) for t in ours.to_tuple()[:2]] == [tuple(t.shape) for t in theirs.to_tuple()[:2]]
    keep = batch["attention_mask"].bool()
    assert (ours[0][keep] - theirs[0][keep]).abs().max() < 1e-5
    assert ours["pooler_output"] is ours.pooler_output and "attentions" not in ours
    assert [k for k, _ in ours.items()] == list(theirs.keys()) and len(ours) == len(theirs) == len(ours.values())
    assert ours.get("pooler_output") is ours.pooler_output and ours.get("attentions", 1) == theirs.get("attentions", 1)
    with pytest.raises(KeyError):
        ours["logits"]
    classifier = bertkit.build("mini-bert", head="classification", num_labels=3).eval()
    out = classifier(batch["input_ids"][:, :8] % 1000)
    assert out[0] is out.logits and out.keys()[0] == "logits"  # a head's output first, as transformers' is


@pytest.mark.parametrize("family, variant", MASKED_LM + [("bert-untied", None)])
def test_resize_token_embeddings_grows_as_transformers_grows(family, variant, tmp_path):
    """Rows for added tokens: the embeddings, a tied or untied decoder and the output bias grow
    as transformers' resize_token_embeddings grows them (new rows at the old rows' mean, which
    transformers draws within ~1e-6 of), config.vocab_size follows, and the saved folder loads
    back into transformers; cutting keeps the first rows."""
    if family == "bert-untied":
        family, cls_name, config = "bert", "BertForMaskedLM", tiny_hf_config(tie_word_embeddings=False)
    else:
        cls_name = FAMILIES[family][0] + "ForMaskedLM"
        config = hf_config(family, variant, cls_name)
    ref = hf_model(cls_name, config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path / "a")).eval()
    V = config.vocab_size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref.resize_token_embeddings(V + 5, pad_to_multiple_of=8)
    assert ours.resize_token_embeddings(V + 5, pad_to_multiple_of=8) is ours.backbone.embeddings.word
    grown = -(-(V + 5) // 8) * 8
    assert ours.config.vocab_size == ref.config.vocab_size == grown
    tables = [(ours.get_input_embeddings().weight, ref.get_input_embeddings().weight)]  # (transformers' names)
    assert (ours.get_output_embeddings().weight is tables[0][0]) == (ref.get_output_embeddings().weight is tables[0][1])
    if ref.get_output_embeddings().weight is not tables[0][1]:
        tables.append((ours.get_output_embeddings().weight, ref.get_output_embeddings().weight))
    with torch.no_grad():
        for mine, theirs in tables:  # the mean, within transformers' draw; then its draw set to the mean, as
            torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=0)  # it moves logits by up to 1e-3
            theirs.copy_(mine)
    ids, mask, types = batch_for(ref.config)
    ids[:, 1] = torch.arange(grown - 3, grown)  # new tokens among old ones
    assert_same(ours(ids, mask, types), reference_outputs(ref, ids, mask, types), mask)
    ours.save_pretrained(tmp_path / "b")
    back = getattr(transformers, cls_name).from_pretrained(tmp_path / "b").eval()
    assert_same(ours(ids, mask, types), reference_outputs(back, ids, mask, types), mask)
    ref.resize_token_embeddings(V - 10)
    ours.resize_token_embeddings(V - 10)
    ids = ids.clamp(max=V - 11)
    assert_same(ours(ids, mask, types), reference_outputs(ref, ids, mask, types), mask)


@pytest.mark.parametrize("family, variant", MASKED_LM)
def test_num_parameters_counts_trainable_and_non_embedding_ones_as_transformers(family, variant, tmp_path):
    """num_parameters(only_trainable=..., exclude_embeddings=...), transformers' keywords (a
    TypeError before), on the encoder and the MLM model, with the word table frozen."""
    for cls_name in (FAMILIES[family][0] + "Model", FAMILIES[family][0] + "ForMaskedLM"):
        ref = hf_model(cls_name, hf_config(family, variant, cls_name))
        ours = bertkit.from_pretrained(_saved(ref, tmp_path / cls_name))
        word = ref.get_input_embeddings().weight
        for model in (ref, ours):
            model.get_input_embeddings().weight.requires_grad_(False)
        # transformers excludes a table by the name named_parameters gives it first: XLM-R's and
        # CamemBERT's MLM models list their head first, so a tied word table counts as the decoder
        first = next(n for n, p in ref.named_parameters() if p is word)
        as_decoder = not isinstance(ref.get_submodule(first.rpartition(".")[0]), nn.Embedding)
        for only_trainable in (False, True):
            for exclude_embeddings in (False, True):
                kw = dict(only_trainable=only_trainable, exclude_embeddings=exclude_embeddings)
                quirk = word.numel() if as_decoder and exclude_embeddings and not only_trainable else 0
                assert ours.num_parameters(**kw) == ref.num_parameters(**kw) - quirk, (cls_name, kw)
        assert ours.num_parameters(only_trainable=True) < ours.num_parameters()


@pytest.mark.parametrize("family, variant", MASKED_LM)
def test_enable_input_require_grads_as_transformers(family, variant, tmp_path):
    """PEFT's switch for adapters on a frozen model (an AttributeError before): with every weight
    frozen the outputs require grad only between enable and disable, as transformers' do (ours under
    activation checkpointing: transformers' own checkpointing switch also enables the hook, which
    non-reentrant checkpointing does not need); the gradient reaching the input embeddings is
    transformers'."""
    cls_name = FAMILIES[family][0] + "Model"
    ref = hf_model(cls_name, hf_config(family, variant, cls_name))
    ours = bertkit.from_pretrained(_saved(ref, tmp_path)).train(False)
    ids, mask, types = batch_for(ref.config)
    for model in (ref, ours):
        model.requires_grad_(False)
    ours.gradient_checkpointing_enable()
    states = {}
    for step in ("before", "enabled", "again", "disabled"):
        if step in ("enabled", "again"):  # enabling twice hooks once (transformers' second call
            ours.enable_input_require_grads()  # loses the first hook, which disable then leaves on)
            if step == "enabled":
                ref.enable_input_require_grads()
        elif step == "disabled":
            ours.disable_input_require_grads(), ref.disable_input_require_grads()
        words = {}

        def keep(name, out):
            if out.requires_grad:
                out.retain_grad()
            words[name] = out

        for name, model in (("ours", ours), ("ref", ref)):
            handle = model.get_input_embeddings().register_forward_hook(lambda m, i, out, name=name: keep(name, out))
            out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
            handle.remove()
            states[step, name] = out.last_hidden_state.requires_grad
            if out.last_hidden_state.requires_grad:
                (out.last_hidden_state * mask[..., None]).square().sum().backward()
        if step == "enabled":
            torch.testing.assert_close(words["ours"].grad * mask[..., None], words["ref"].grad * mask[..., None],
                                       atol=1e-4, rtol=1e-4)
    assert states == {(step, name): step in ("enabled", "again") for step in ("before", "enabled", "again", "disabled")
                      for name in ("ours", "ref")}


@pytest.mark.parametrize("cls_name, tied", [("BertForMaskedLM", True), ("BertForMaskedLM", False),
                                           ("BertForPreTraining", True), ("AlbertForPreTraining", True)])
def test_set_input_embeddings_and_tie_weights_as_transformers(cls_name, tied, tmp_path):
    """A replaced word table: a tied decoder follows it (transformers' set_input_embeddings then
    tie_weights), an untied one keeps its own; the logits are transformers' with the same table.
    The pre-training head (MLM + NSP / SOP) has its decoder one level down: get_output_embeddings
    gave None there, so the decoder stayed on the old table."""
    config = tiny_hf_config(tie_word_embeddings=tied) if cls_name.startswith("Bert") else hf_config(
        "albert", "one-shared-block", cls_name)
    ref = hf_model(cls_name, config)
    ours = bertkit.from_pretrained(_saved(ref, tmp_path / "a")).eval()
    assert tuple(ours.get_output_embeddings().weight.shape) == tuple(ref.get_output_embeddings().weight.shape)
    table = torch.randn(ref.get_input_embeddings().weight.shape, generator=torch.Generator().manual_seed(3))
    ref.set_input_embeddings(nn.Embedding.from_pretrained(table.clone(), freeze=False))
    ref.tie_weights()
    ours.set_input_embeddings(nn.Embedding.from_pretrained(table.clone(), freeze=False))
    assert (ours.get_output_embeddings().weight is ours.get_input_embeddings().weight) == tied == (
        ref.get_output_embeddings().weight is ref.get_input_embeddings().weight)
    ids, mask, types = batch_for(ref.config)
    assert_same(ours(ids, mask, types), reference_outputs(ref, ids, mask, types), mask)
    with pytest.raises(bertkit.BertkitError, match=r"set_input_embeddings takes an nn.Embedding of shape \("):
        ours.set_input_embeddings(nn.Embedding(7, 3))


def test_resize_token_embeddings_without_mean_draws_from_the_initializer_and_refuses_bad_sizes():
    model = bertkit.build("bert-base", head="mlm", num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64,
                          vocab_size=50)
    word = model.backbone.embeddings.word
    assert model.resize_token_embeddings() is word  # nothing asked: nothing changes
    new = model.resize_token_embeddings(2050, mean_resizing=False).weight[50:]
    assert abs(new.std().item() - model.config.initializer_range) < 0.002 and abs(new.mean().item()) < 0.002
    assert model.head.decoder.weight is model.backbone.embeddings.word.weight  # still tied
    assert model.head.bias[50:].eq(0).all() and model.head.decoder.out_features == 2050
    for bad in (0, -3, 2.5, True):
        with pytest.raises(BertkitError, match=f"new_num_tokens must be a whole number of at least 1, got {bad}"):
            model.resize_token_embeddings(bad)


def test_a_refused_resize_leaves_the_model_as_it_was():
    """A cut past the padding id is refused by the config: the tables had been cut already, so the
    next save wrote a vocabulary of one size beside tables of another (loadable by neither)."""
    model = bertkit.build("roberta-base", head="mlm", num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64,
                          vocab_size=50, pad_token_id=40)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(BertkitError, match=r"pad_token_id 40 is outside the vocabulary \(size 30\)"):
        model.resize_token_embeddings(30)
    after = model.state_dict()
    assert model.config.vocab_size == 50 and after.keys() == before.keys()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert model.head.decoder.weight is model.backbone.embeddings.word.weight


def test_saving_a_model_with_an_unmerged_adapter_says_to_merge_it(tmp_path):
    """PEFT wraps a projection as `base_layer` beside `lora_A` / `lora_B`: such names have no
    Hugging Face name, and the error says what to do."""
    model = bertkit.build("bert-base", num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64, vocab_size=50)
    attn = model.backbone.encoder.layer_for(0).attn

    class Wrapped(torch.nn.Module):  # PEFT's LoRA layer, in outline
        def __init__(self, base):
            super().__init__()
            self.base_layer, self.lora_A = base, torch.nn.Linear(base.in_features, 2, bias=False)

        def forward(self, x):
            return self.base_layer(x)

    attn.query = Wrapped(attn.query)
    with pytest.raises(BertkitError, match=r"parameter '.*query\.base_layer\.weight' has no Hugging Face name; a PEFT "
                                           r"adapter's: merge it first \(merge_and_unload\(\)\)"):
        model.save_pretrained(tmp_path / "out")
