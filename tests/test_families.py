"""What makes each family itself: ALBERT's sharing, DistilBERT's student initialization and
sinusoidal positions, ELECTRA's generator/discriminator pair."""

import json
import re
import warnings

import pytest
import torch
import transformers

import bertkit
import bertkit.config
from bertkit.models.albert import AlbertConfig
from bertkit.models.distilbert import DistilBertConfig, sinusoidal_table
from bertkit.models.electra import ElectraConfig
from bertkit.objectives.registry import build_objective
from conftest import randomize


def test_albert_base_is_one_block_applied_twelve_times():
    model = bertkit.build("albert-base")
    encoder = model.backbone.encoder
    blocks = {id(encoder.layer_for(i)) for i in range(encoder.num_layers)}
    assert encoder.num_layers == 12 and len(blocks) == 1
    assert model.backbone.embeddings.word.weight.shape == (30000, 128)
    assert model.backbone.projection.weight.shape == (768, 128)


def test_albert_groups_follow_transformers_schedule():
    config = AlbertConfig(vocab_size=50, hidden_size=16, num_layers=6, num_heads=2, intermediate_size=20,
                          embedding_size=8, num_hidden_groups=3, inner_group_num=2, max_positions=16)
    encoder = bertkit.build(config).backbone.encoder
    order = [(g, j) for i in range(encoder.num_layers)
             for g, group in enumerate(encoder.layers) for j, block in enumerate(group)
             if block is encoder.layer_for(i)]
    # depth i runs group int(i / (L / groups)), each group's blocks in turn
    assert order == [(0, 0), (0, 1), (0, 0), (0, 1), (1, 0), (1, 1), (1, 0), (1, 1), (2, 0), (2, 1), (2, 0), (2, 1)]


def test_albert_config_refuses_no_groups():
    with pytest.raises(bertkit.BertkitError, match="num_hidden_groups must be >= 1, got 0"):
        AlbertConfig(num_layers=2, num_hidden_groups=0)


def test_albert_with_more_groups_than_layers_runs_and_round_trips_as_in_transformers(tmp_path):
    """transformers builds every group and runs group int(i / (L / groups)) at depth i: with 2
    layers and 3 groups, groups 0 and 1; group 2 is never run but stays in the file."""
    config = transformers.AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_attention_heads=4,
                                       intermediate_size=37, num_hidden_layers=2, num_hidden_groups=3,
                                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ref = transformers.AlbertModel(config).eval()
    randomize(ref, 0)
    ref.save_pretrained(tmp_path / "hf")
    ours = bertkit.from_pretrained(tmp_path / "hf")
    ids = torch.randint(5, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = ref(ids).last_hidden_state
        assert (ours(ids).last_hidden_state - expected).abs().max().item() <= 1e-5
    ours.save_pretrained(tmp_path / "ours")
    again = transformers.AlbertModel.from_pretrained(tmp_path / "ours").eval()
    for name, tensor in ref.state_dict().items():  # the unused group's weights too
        assert torch.equal(again.state_dict()[name], tensor), name
    with torch.no_grad():
        assert torch.equal(again(ids).last_hidden_state, expected)


@pytest.fixture(scope="module")
def teacher():
    config = bertkit.EncoderConfig(vocab_size=120, hidden_size=32, num_layers=12, num_heads=4,
                                   intermediate_size=48, max_positions=32)
    torch.manual_seed(0)
    return bertkit.build(config, head="mlm").eval()


def test_student_takes_embeddings_and_chosen_layers_from_teacher(teacher):
    student = bertkit.student_from_teacher(teacher).eval()
    assert student.config.family == "distilbert" and student.config.num_layers == 6
    s, t = student.backbone, teacher.backbone
    assert torch.equal(s.embeddings.word.weight, t.embeddings.word.weight)
    for k, i in enumerate((0, 2, 4, 7, 9, 11)):
        theirs = t.encoder.layer_for(i).state_dict()
        for name, value in s.encoder.layer_for(k).state_dict().items():
            assert torch.equal(value, theirs[name]), (k, i, name)
    for name, value in student.head.state_dict().items():
        assert torch.equal(value, teacher.head.state_dict()[name]), name
    # Segment-A input embeds identically: the teacher's token-type vector went into positions.
    ids = torch.randint(1, 120, (2, 10))
    assert torch.allclose(s.embeddings(ids), t.embeddings(ids), atol=1e-6)
    # A student made of every teacher layer is the teacher.
    whole = bertkit.student_from_teacher(teacher, layers=range(12)).eval()
    assert (whole(ids).logits - teacher(ids).logits).abs().max().item() <= 1e-5


def test_a_student_of_an_untied_teacher_keeps_its_word_embeddings_and_its_decoder(teacher, tmp_path):
    # a tied student took the untied teacher's decoder matrix as its word embeddings
    untied = bertkit.build(teacher.config.replace(tie_word_embeddings=False), head="mlm").eval()
    student = bertkit.student_from_teacher(untied, layers=range(12)).eval()
    s, t = student.backbone.embeddings.word.weight, untied.backbone.embeddings.word.weight
    assert torch.equal(s, t) and not torch.equal(t, untied.head.decoder.weight)
    assert torch.equal(student.head.decoder.weight, untied.head.decoder.weight)
    ids = torch.randint(1, 120, (2, 10))
    with torch.no_grad():
        assert (student(ids).logits - untied(ids).logits).abs().max().item() <= 1e-5
    student.save_pretrained(tmp_path)
    theirs = transformers.DistilBertForMaskedLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert (theirs(ids).logits - untied(ids).logits).abs().max().item() <= 1e-5
    from bertkit.models.distilbert import copy_from_teacher

    tied_student = bertkit.build("distilbert-base", head="mlm", **{k: getattr(teacher.config, k) for k in (
        "vocab_size", "hidden_size", "num_heads", "intermediate_size", "max_positions")}, num_layers=6)
    with pytest.raises(bertkit.BertkitError, match="the teacher's tie_word_embeddings is False, the student's True"):
        copy_from_teacher(tied_student, untied)


def test_student_refuses_bad_layer_lists(teacher):
    for layers, shown in (([0, 12], "0,12"), ([3, 1], "3,1"), ([2, 2], "2,2"), ([], "(none)")):
        with pytest.raises(bertkit.BertkitError, match=fr"teacher layers {re.escape(shown)}: give increasing block "
                                                       r"indices in 0\.\.11 \(the teacher has 12 blocks\)$"):
            bertkit.student_from_teacher(teacher, layers=layers)
    with pytest.raises(bertkit.BertkitError, match="from a BERT teacher .DistilBERT. or a RoBERTa one"):
        bertkit.student_from_teacher(bertkit.build("distilbert-base", num_layers=1))


def test_a_roberta_teacher_gives_a_roberta_student_as_distilroberta(tmp_path):
    """distilroberta-base is a RoBERTa of 6 blocks taken from roberta-base: the student of a
    RoBERTa teacher is one (it was refused), equal to transformers' teacher cut to those blocks, and
    saved as RobertaForMaskedLM."""
    config = transformers.RobertaConfig(vocab_size=120, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                                        intermediate_size=48, max_position_embeddings=40, pad_token_id=1,
                                        type_vocab_size=1)
    torch.manual_seed(0)
    ref = transformers.RobertaForMaskedLM(config).eval()
    ref.save_pretrained(tmp_path / "teacher")
    student = bertkit.student_from_teacher(bertkit.from_pretrained(tmp_path / "teacher"), layers=[1, 3]).eval()
    assert student.config.family == "roberta" and student.config.num_layers == 2
    ref.roberta.encoder.layer = torch.nn.ModuleList([ref.roberta.encoder.layer[i] for i in (1, 3)])
    ids = torch.randint(3, 120, (2, 10))
    with torch.no_grad():
        assert (student(ids).logits - ref(ids).logits).abs().max().item() <= 1e-5
        student.save_pretrained(tmp_path / "student")
        saved = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "student").eval()
        assert type(saved).__name__ == "RobertaForMaskedLM" and saved.config.num_hidden_layers == 2
        assert (saved(ids).logits - ref(ids).logits).abs().max().item() <= 1e-5


def test_distillation_refuses_loss_weights_that_make_no_loss(teacher):
    from bertkit.objectives import Distillation, ReplacedTokenDetection

    student = bertkit.student_from_teacher(teacher)
    for weights, said in ((dict(alpha_ce=-1), "alpha_ce must be a finite number of at least 0, got -1"),
                          (dict(temperature=float("inf")), "temperature must be a finite number above 0, got inf"),
                          (dict(alpha_ce=True), "alpha_ce must be a finite number of at least 0, got True"),
                          (dict(alpha_ce=0, alpha_mlm=0, alpha_cos=0), "are all 0: the loss would be 0")):
        with pytest.raises(bertkit.BertkitError, match=re.escape(said)):
            Distillation(student, teacher, **weights)
    with pytest.raises(bertkit.BertkitError, match="weight must be a finite number of at least 0, got -2"):
        ReplacedTokenDetection(*bertkit.build_electra_pair(), weight=-2)


@pytest.mark.parametrize("depth", [1, 3, 4, 7, 24])
def test_a_student_of_another_depth_takes_half_the_teacher_first_to_last(depth):
    """12 blocks give the released 0, 2, 4, 7, 9, 11 (above); any depth keeps the ends and spreads
    the rest evenly, from the Python API as from the command line."""
    sizes = dict(vocab_size=50, hidden_size=8, num_layers=depth, num_heads=2, intermediate_size=8)
    teacher = bertkit.build("bert-base", head="mlm", **sizes)
    student = bertkit.student_from_teacher(teacher)
    blocks = [teacher.backbone.encoder.layer_for(i).state_dict() for i in range(depth)]
    taken = [next(i for i, block in enumerate(blocks) if all(torch.equal(v, block[n]) for n, v in
                                                             student.backbone.encoder.layer_for(k).state_dict().items()))
             for k in range(student.config.num_layers)]
    assert len(taken) == max(depth // 2, 1) and taken[0] == 0 and (depth < 4 or taken[-1] == depth - 1)
    gaps = [b - a for a, b in zip(taken, taken[1:])]
    assert not gaps or max(gaps) - min(gaps) <= 1  # evenly spread
    assert build_objective("distill", "distilbert-base", teacher="bert-base", **sizes).student.config.num_layers == \
        student.config.num_layers


def test_sinusoidal_positions_equal_transformers_and_stay_frozen():
    config = DistilBertConfig(vocab_size=50, hidden_size=32, num_layers=1, num_heads=4, intermediate_size=40,
                              max_positions=20, sinusoidal_positions=True)
    ours = bertkit.build(config)
    position = ours.backbone.embeddings.position.weight
    assert not position.requires_grad
    ref = transformers.DistilBertModel(transformers.DistilBertConfig(
        vocab_size=50, dim=32, n_layers=1, n_heads=4, hidden_dim=40, max_position_embeddings=20,
        sinusoidal_pos_embds=True))
    assert (position - ref.embeddings.position_embeddings.weight).abs().max().item() <= 1e-6
    assert torch.equal(position, sinusoidal_table(20, 32))


def test_electra_pair_shares_embeddings_and_both_losses_reach_them():
    small = dict(vocab_size=100, num_layers=2, max_positions=16)
    generator, discriminator = bertkit.build_electra_pair(
        ElectraConfig(embedding_size=16, hidden_size=32, num_heads=4, intermediate_size=64, **small),
        ElectraConfig(embedding_size=16, hidden_size=24, num_heads=2, intermediate_size=48, **small))
    assert generator.backbone.embeddings is discriminator.backbone.embeddings
    assert generator.head.decoder.weight is discriminator.backbone.embeddings.word.weight
    assert generator.backbone.projection is not discriminator.backbone.projection
    ids = torch.randint(1, 100, (2, 8))
    gen_logits = generator(ids).logits  # (B, T, V)
    disc_logits = discriminator(ids).logits  # (B, T)
    assert gen_logits.shape == (2, 8, 100) and disc_logits.shape == (2, 8)
    word = discriminator.backbone.embeddings.word.weight
    (grad_from_generator,) = torch.autograd.grad(gen_logits.sum(), word, retain_graph=True)
    (grad_from_discriminator,) = torch.autograd.grad(disc_logits.sum(), word)
    assert grad_from_generator.abs().sum() > 0 and grad_from_discriminator.abs().sum() > 0


def test_electra_pair_from_preset_names_uses_the_released_generator():
    with torch.device("meta"):
        generator, discriminator = bertkit.build_electra_pair("electra-small")
    assert generator.config.hidden_size == 256 and discriminator.config.hidden_size == 256
    assert generator.backbone.embeddings is discriminator.backbone.embeddings
    for name in ("electra-small", "electra-base", "electra-large"):
        with torch.device("meta"):
            generator, _ = bertkit.build_electra_pair(name)
        assert generator.config == bertkit.PRESETS[f"{name}-generator"].config


def test_a_small_electra_pair_is_a_preset_with_overrides(tmp_path):
    """build_electra_pair took no overrides, so a small pair needed two hand-made configs (the
    generator's width worked out by hand); `build("electra-base", num_layers=2, ...)` had no twin."""
    generator, discriminator = bertkit.build_electra_pair("electra-base", num_layers=2, hidden_size=96, num_heads=6,
                                                          intermediate_size=192, embedding_size=48, vocab_size=120)
    d, g = discriminator.config, generator.config
    assert (d.num_layers, d.hidden_size, d.num_heads, d.vocab_size) == (2, 96, 6, 120)
    assert (g.num_layers, g.vocab_size, g.embedding_size) == (2, 120, 48)  # the depth and tables follow
    assert (g.hidden_size, g.num_heads, g.intermediate_size) == (32, 2, 64)  # a third as wide, as base's is
    assert generator.backbone.embeddings is discriminator.backbone.embeddings
    ids = torch.randint(1, 120, (2, 8))
    assert generator(ids).logits.shape == (2, 8, 120) and discriminator(ids).logits.shape == (2, 8)
    config = bertkit.PRESETS["electra-small"].config
    for call, said in [(lambda: bertkit.build_electra_pair(config), "^name the generator .* or build from one of "
                                                                    r"them with overrides: build_electra_pair\("),
                       (lambda: bertkit.build_electra_pair(config, config, num_layers=2), "^overrides change an "),
                       (lambda: bertkit.build_electra_pair("electra-small", num_layerz=2), "num_layerz")]:
        with pytest.raises(bertkit.BertkitError, match=said):
            call()


def test_an_electra_pair_whose_configs_describe_other_embeddings_is_refused(tmp_path):
    """The generator takes the discriminator's embedding module, so a generator config naming other
    tables saved a folder neither transformers nor bertkit could load (or, for layer_norm_eps,
    one that loaded to other logits)."""
    small = bertkit.PRESETS["electra-small"].config.replace(num_layers=1, vocab_size=60)
    for field, value in (("max_positions", 128), ("type_vocab_size", 1), ("layer_norm_eps", 1e-3)):
        with pytest.raises(bertkit.BertkitError, match=f"generator {field} {value} and discriminator {field} "):
            bertkit.build_electra_pair(small, small.replace(**{field: value}))
    wide = small.replace(hidden_size=512, num_heads=4, intermediate_size=64)
    with pytest.warns(UserWarning, match="wider than the discriminator"):
        generator, _ = bertkit.build_electra_pair(small, wide)
    generator.save_pretrained(tmp_path)
    assert bertkit.from_pretrained(tmp_path).config.hidden_size == 512


@pytest.mark.slow  # 12 s
def test_deberta_v3_base_bf16_on_512_tokens_is_finite_and_close_to_fp32():
    """bf16 must not overflow (dtypes follow the input): per-token cosine >= 0.999 to fp32,
    mean |diff| <= 0.03 and max |diff| <= 0.3 on unit-scale hidden states. (A small vocabulary:
    building 128k random embeddings took longer than the rest.)"""
    torch.manual_seed(0)
    model = bertkit.build(bertkit.PRESETS["deberta-v3-base"].config.replace(vocab_size=1000)).eval()
    ids = torch.randint(1, 1000, (2, 512))
    mask = torch.ones(2, 512, dtype=torch.long)
    mask[1, 300:] = 0
    with torch.inference_mode():
        fp32 = model(ids, mask).last_hidden_state
        bf16 = model.to(torch.bfloat16)(ids, mask).last_hidden_state
    assert bf16.dtype == torch.bfloat16 and torch.isfinite(bf16).all()
    keep = mask.bool()
    a, b = fp32[keep], bf16.float()[keep]
    assert torch.nn.functional.cosine_similarity(a, b, dim=-1).min().item() >= 0.999
    assert (a - b).abs().mean().item() <= 0.03 and (a - b).abs().max().item() <= 0.3


@pytest.mark.parametrize("name", ["deberta-base", "deberta-v3-xsmall"])
def test_deberta_explicit_path_matches_fused_and_returns_attentions(name):
    config = bertkit.PRESETS[name].config.replace(num_layers=2, vocab_size=100, max_positions=64)
    config = config.replace(conv_kernel_size=3) if config.family == "deberta-v2" else config
    model = bertkit.build(config).eval()
    ids = torch.randint(1, 100, (2, 40))
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 25:] = 0
    with torch.no_grad():
        fused = model(ids, mask)
        explicit = model(ids, mask, output_attentions=True)
    keep = mask.bool()
    diff = (fused.last_hidden_state[keep] - explicit.last_hidden_state[keep]).abs().max().item()
    assert diff <= 1e-4
    assert len(explicit.attentions) == 2 and explicit.attentions[0].shape == (2, config.num_heads, 40, 40)
    probs = explicit.attentions[0][1]  # (N, T, T)
    assert probs[:, :25, 25:].abs().max().item() == 0.0  # real queries: no weight on padding
    assert (probs[:, 25:] - 1 / 40).abs().max().item() <= 1e-7  # padding queries: uniform, as in transformers


def test_deberta_pos_att_type_accepts_the_config_string_and_refuses_unknown_terms():
    from bertkit.models.deberta import DebertaConfig

    assert DebertaConfig(pos_att_type="p2c|c2p").pos_att_type == ("p2c", "c2p")
    assert DebertaConfig(pos_att_type=["c2p"]).pos_att_type == ("c2p",)
    with pytest.raises(bertkit.BertkitError, match="pos_att_type"):
        DebertaConfig(pos_att_type="c2p|p2p")


def emd_model(**kw):
    from bertkit.models.deberta import DebertaConfig

    config = DebertaConfig(vocab_size=100, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=40,
                           max_positions=32, position_buckets=8, enhanced_mask_decoder=True, **kw)
    torch.manual_seed(0)
    return bertkit.build(config, head="mlm").eval()


EMD_IDS = torch.randint(1, 100, (2, 12), generator=torch.Generator().manual_seed(0))
EMD_MASK = torch.tensor([[1] * 12, [1] * 7 + [0] * 5])


def test_emd_without_absolute_positions_is_the_last_layer_again():
    """EMD changes the output only through absolute positions: with a zero position table and
    one step, its query stream is the last layer's own input, so it decodes the encoder output."""
    model = emd_model()
    with torch.no_grad():
        model.head.position.weight.zero_()
        model.head.steps = 1
        out = model(EMD_IDS, EMD_MASK)
        plain = model.head.predict(out.last_hidden_state)
    keep = EMD_MASK.bool()
    assert (out.logits[keep] - plain[keep]).abs().max().item() <= 1e-5
    with torch.no_grad():
        model.head.position.weight.normal_()
        moved = model(EMD_IDS, EMD_MASK).logits
    assert (moved[keep] - plain[keep]).abs().max().item() > 1e-2


def test_emd_switched_off_recovers_the_plain_head_exactly():
    model = emd_model()
    plain = bertkit.Model(model.config.replace(enhanced_mask_decoder=False), head="mlm").eval()
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    assert missing == [] and unexpected == ["head.position.weight"]
    model.head.steps = 0
    with torch.no_grad():
        assert torch.equal(model(EMD_IDS, EMD_MASK).logits, plain(EMD_IDS, EMD_MASK).logits)


def test_emd_gradients_reach_positions_last_layer_and_head():
    model = emd_model(conv_kernel_size=3).train()
    out = model(EMD_IDS, EMD_MASK)
    assert out.logits.shape == (2, 12, 100) and out.hidden_states is None
    out.logits.logsumexp(-1).mean().backward()
    last = model.backbone.encoder.layer_for(2)
    for p in (model.head.position.weight, last.attn.query.weight, last.ffn.up.weight, model.head.transform.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0


@pytest.mark.filterwarnings("ignore:.*transformers lacks the enhanced mask decoder")  # (its own test below)
def test_emd_survives_save_and_transformers_still_loads_the_encoder(tmp_path):
    model = emd_model()
    with torch.no_grad():
        model.head.position.weight.normal_()
    model.save_pretrained(tmp_path)
    again = bertkit.from_pretrained(tmp_path)
    assert again.config.enhanced_mask_decoder
    with torch.no_grad():
        assert torch.equal(again(EMD_IDS, EMD_MASK).logits, model(EMD_IDS, EMD_MASK).logits)
        ref = transformers.DebertaV2ForMaskedLM.from_pretrained(tmp_path).eval()
        theirs = ref.deberta(input_ids=EMD_IDS, attention_mask=EMD_MASK).last_hidden_state
        ours = model(EMD_IDS, EMD_MASK).last_hidden_state
    keep = EMD_MASK.bool()
    assert (theirs[keep] - ours[keep]).abs().max().item() <= 1e-4


def test_emd_save_warns_once_that_transformers_decodes_otherwise(tmp_path):
    from bertkit.interop.hf import EnhancedMaskDecoderWarning

    model = emd_model()
    with pytest.warns(EnhancedMaskDecoderWarning, match="transformers lacks the enhanced mask decoder") as said:
        model.save_pretrained(tmp_path / "first")
    assert len([w for w in said if w.category is EnhancedMaskDecoderWarning]) == 1
    assert str(tmp_path / "first") in str(said[0].message) and "MLM logits differ" in str(said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EnhancedMaskDecoderWarning)
        model.save_pretrained(tmp_path / "again")  # the same model: said once (a run saves at every checkpoint)
        plain = bertkit.Model(model.config.replace(enhanced_mask_decoder=False), head="mlm")
        plain.save_pretrained(tmp_path / "plain")
    from bertkit.train.checkpoint import save_final

    with pytest.warns(EnhancedMaskDecoderWarning) as said:  # a run's final save goes through a staging folder
        save_final({"": emd_model()}, tmp_path / "run")
    assert str(said[0].message).startswith(f"{tmp_path / 'run'}: saved as")  # not run/.writing-xxxx


def test_deberta_even_conv_kernel_is_refused_by_name(tmp_path):
    config = transformers.DebertaV2Config(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=37, max_position_embeddings=64, type_vocab_size=0,
                                          relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"],
                                          conv_kernel_size=4)
    ref = transformers.DebertaV2Model(config).eval()
    with pytest.raises(RuntimeError):  # transformers cannot run it either: the convolution changes the length
        ref(torch.randint(5, 99, (1, 7)))
    ref.save_pretrained(tmp_path)
    with pytest.raises(bertkit.BertkitError, match=r"config.json: config: conv_kernel_size must be odd, got 4$"):
        bertkit.from_pretrained(tmp_path)


@pytest.mark.parametrize("saved, named", [("DebertaV2Model", "deberta"), ("DebertaModel", "deberta-v2")])
def test_one_deberta_s_weights_under_the_other_s_config_say_so(saved, named, tmp_path):
    """Both name their tensors deberta.*: v1's fused Q/K/V, or v2's key bias, gives the file away."""
    sizes = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                 relative_attention=True, pos_att_type=["p2c", "c2p"])
    config = getattr(transformers, saved.replace("Model", "Config"))(**sizes)
    getattr(transformers, saved)(config).save_pretrained(tmp_path)
    edit = json.loads((tmp_path / "config.json").read_text())
    edit.update(model_type=named, architectures=[])
    (tmp_path / "config.json").write_text(json.dumps(edit))
    with pytest.raises(bertkit.BertkitError, match=fr"unexpected tensor .*named as another family's weights: the "
                                                   fr"config's is {named}\)$"):
        bertkit.from_pretrained(tmp_path)


@pytest.mark.parametrize("spelling, normed", [("layer_norm|x", True), ("x", False), ("NONE| Layer_Norm ", True)])
def test_deberta_norm_rel_ebd_is_read_as_transformers_reads_it(spelling, normed, tmp_path):
    """transformers splits it on '|' and normalizes the position table if a part is layer_norm."""
    config = transformers.DebertaV2Config(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=37, max_position_embeddings=64, type_vocab_size=0,
                                          relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"],
                                          norm_rel_ebd=spelling)
    ref = transformers.DebertaV2Model(config).eval()
    randomize(ref, 0)  # (LayerNorm's 1/0 would hide a norm left out)
    ref.save_pretrained(tmp_path)
    ours = bertkit.from_pretrained(tmp_path)
    assert (ours.config.norm_rel_ebd == "layer_norm") is normed
    ids = torch.randint(5, 99, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (ours(ids).last_hidden_state - ref(ids).last_hidden_state).abs().max().item() <= 1e-4


def test_a_safetensors_file_that_shrinks_while_read_is_one_line(tmp_path, monkeypatch):
    """torch maps the tensors after safetensors read the header: a file cut short or replaced in
    between fails there with a RuntimeError, not safetensors' own error."""
    import safetensors.torch

    bertkit.build("bert-base", vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=20,
                  max_positions=16).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"

    def shrunk(path, *args, **kwargs):
        raise RuntimeError(f"file {path} size <118208> is smaller than the required mapping size <303336>")

    monkeypatch.setattr(safetensors.torch, "load_file", shrunk)
    with pytest.raises(bertkit.BertkitError, match="not a readable safetensors file") as error:
        bertkit.from_pretrained(tmp_path)
    assert str(error.value).startswith(f"{weights}: ") and "\n" not in str(error.value)
    assert "cut short or replaced while it was read" in str(error.value)


def test_one_model_of_a_pair_sharing_embeddings_refuses_to_resize_them():
    """Resizing the generator grew the table both read while the discriminator's config kept the
    old size (a folder neither library loads); resizing both untied the generator's decoder."""
    from bertkit.objectives.gdes import build_pair

    small = dict(vocab_size=100, num_layers=2, max_positions=16)
    electra = bertkit.build_electra_pair(
        ElectraConfig(embedding_size=16, hidden_size=32, num_heads=4, intermediate_size=64, **small),
        ElectraConfig(embedding_size=16, hidden_size=24, num_heads=2, intermediate_size=48, **small))
    gdes = build_pair(bertkit.PRESETS["deberta-v3-base"].config.replace(
        hidden_size=32, num_heads=2, intermediate_size=64, **small))
    for model in (*electra, *gdes):
        with pytest.raises(bertkit.BertkitError, match="shares its embeddings with another .* resizing one"):
            model.resize_token_embeddings(103)
        assert model.config.vocab_size == model.get_input_embeddings().weight.shape[0] == 100
    alone = bertkit.build(ElectraConfig(embedding_size=16, hidden_size=24, num_heads=2, intermediate_size=48,
                                        **small), head="mlm")
    assert alone.resize_token_embeddings(103, pad_to_multiple_of=2).num_embeddings == 104
    with pytest.raises(bertkit.BertkitError, match="pad_to_multiple_of must be a whole number of at least 1, got 0"):
        alone.resize_token_embeddings(103, pad_to_multiple_of=0)
