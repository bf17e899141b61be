import pytest

import bertkit
from bertkit.config import EncoderConfig


@pytest.mark.parametrize("bad, words", [
    (dict(hidden_size=30, num_heads=4), "not divisible"),
    (dict(hidden_act="gelu_wrong"), "hidden_act"),
    (dict(num_layers=0), "num_layers"),
    (dict(hidden_dropout=1.5), "hidden_dropout"),
    (dict(pad_token_id=40000), "pad_token_id"),
    (dict(num_labels=3, label_names=("a", "b")), "label_names"),
    # wrong types, as a config.json may hold them: refused by name, not as a TypeError from torch
    (dict(hidden_dropout=None), "hidden_dropout must be a number, got None"),
    (dict(type_vocab_size=2.0), "type_vocab_size must be an integer, got 2.0"),
    (dict(num_layers=True), "num_layers must be an integer, got True"),
    (dict(initializer_range="x"), "initializer_range must be a number, got 'x'"),
    (dict(tie_word_embeddings="false"), "tie_word_embeddings must be true or false, got 'false'"),
    (dict(problem_type=1), "problem_type must be a string, got 1"),
])
def test_invalid_configs_are_refused_on_construction(bad, words):
    with pytest.raises(bertkit.BertkitError, match=words):
        EncoderConfig(**bad)


def test_types_allow_what_transformers_allows():
    # a rate or an epsilon may be written as an integer; only classifier_dropout may be None
    config = EncoderConfig(hidden_dropout=0, layer_norm_eps=1, classifier_dropout=None)
    assert config.hidden_dropout == 0 and config.classifier_dropout is None


def test_a_family_field_of_the_wrong_type_is_refused_by_name():
    from bertkit.models import albert, electra
    with pytest.raises(bertkit.BertkitError, match="embedding_size must be an integer, got 2.5"):
        albert.AlbertConfig(embedding_size=2.5)
    with pytest.raises(bertkit.BertkitError, match="summary_last_dropout must be a number, got None"):
        electra.ElectraConfig(summary_last_dropout=None)


@pytest.mark.parametrize("family, field", [("distilbert", "qa_dropout"), ("deberta", "pooler_dropout"),
                                           ("electra", "summary_first_dropout"), ("modern", "mlp_dropout")])
def test_every_dropout_field_is_checked(family, field):
    # a family's own rate out of [0, 1) was a traceback from torch when its head was built
    from bertkit.models import deberta, distilbert, electra, modern
    config_class = {"distilbert": distilbert.DistilBertConfig, "deberta": deberta.DebertaConfig,
                    "electra": electra.ElectraConfig, "modern": modern.ModernConfig}[family]
    with pytest.raises(bertkit.BertkitError, match=f"config: {field} must be in \\[0, 1\\), got 5.0"):
        config_class(**{field: 5.0})


@pytest.mark.parametrize("family, field", [("deberta", "conv_act"), ("deberta", "pooler_act"),
                                           ("electra", "summary_act"), ("modern", "classifier_activation")])
def test_every_activation_field_is_checked(family, field):
    # A family's own activation fields are refused by name, as hidden_act is, not by a KeyError
    # when the layer that reads them is built.
    from bertkit.models import deberta, electra, modern
    config_class = {"deberta": deberta.DebertaConfig, "electra": electra.ElectraConfig,
                    "modern": modern.ModernConfig}[family]
    with pytest.raises(bertkit.BertkitError, match=f"unknown {field} 'prelu'"):
        config_class(**{field: "prelu"})


def test_overrides_are_typed_and_unknown_keys_fail():
    cfg = EncoderConfig().replace(num_layers=2)
    assert cfg.num_layers == 2
    with pytest.raises(bertkit.BertkitError, match="unknown field"):
        cfg.replace(num_layer=2)
    with pytest.raises(bertkit.BertkitError, match="unknown field"):
        bertkit.build("mini-bert", hiden_size=64)


def test_build_rejects_unknown_names_and_heads(tmp_path):
    with pytest.raises(bertkit.BertkitError, match="unknown model"):
        bertkit.build("bert-gigantic")
    with pytest.raises(bertkit.BertkitError, match="unknown head"):
        bertkit.build("mini-bert", head="summarization")
    with pytest.raises(bertkit.BertkitError, match="a qa head scores each token as start and end: num_labels is 2"):
        bertkit.build("mini-bert", head="qa", num_labels=3)  # (was silently a 2-output head)
    bertkit.build("mini-bert").save_pretrained(tmp_path)
    with pytest.raises(bertkit.BertkitError, match="a qa head scores each token as start and end: num_labels is 2"):
        bertkit.from_pretrained(tmp_path, head="qa", num_labels=3)


@pytest.mark.parametrize("head", [None, "mlm", "pretraining", "classification", "token-classification", "qa"])
def test_every_head_builds_and_fills_its_outputs(head):
    import torch
    model = bertkit.build("mini-bert", head=head, num_labels=3 if head != "qa" else 2).eval()
    ids = torch.randint(1, 8192, (2, 7))
    out = model(ids, torch.ones(2, 7, dtype=torch.long))
    assert out.last_hidden_state.shape == (2, 7, 192)
    expected = {
        None: {},
        "mlm": {"logits": (2, 7, 8192)},
        "pretraining": {"logits": (2, 7, 8192), "pair_logits": (2, 2)},
        "classification": {"logits": (2, 3)},
        "token-classification": {"logits": (2, 7, 3)},
        "qa": {"start_logits": (2, 7), "end_logits": (2, 7)},
    }[head]
    for name in ("logits", "pair_logits", "start_logits", "end_logits"):
        value = getattr(out, name)
        if name in expected:
            assert tuple(value.shape) == expected[name]
        else:
            assert value is None


def test_mlm_decoder_is_tied_to_word_embeddings():
    model = bertkit.build("mini-bert", head="mlm")
    assert model.head.decoder.weight is model.backbone.embeddings.word.weight
    untied = bertkit.build("mini-bert", head="mlm", tie_word_embeddings=False)
    assert untied.head.decoder.weight is not untied.backbone.embeddings.word.weight


def test_a_config_of_another_family_is_refused_by_name():
    import bertkit

    with pytest.raises(bertkit.BertkitError, match="family 'albert' is built from its own config class, AlbertConfig, not EncoderConfig"):
        bertkit.build(bertkit.EncoderConfig(family="albert"))
    with pytest.raises(bertkit.BertkitError, match="family 'bert' is built from its own config class, EncoderConfig, not AlbertConfig"):
        bertkit.build("albert-base", family="bert")


def test_a_list_for_a_tuple_field_becomes_a_tuple_so_the_config_stays_hashable_and_equal():
    listed = bertkit.build("mini-bert", head="classification", num_labels=2, label_names=["neg", "pos"]).config
    tupled = bertkit.build("mini-bert", head="classification", num_labels=2, label_names=("neg", "pos")).config
    assert listed == tupled and hash(listed) == hash(tupled) and listed.label_names == ("neg", "pos")
