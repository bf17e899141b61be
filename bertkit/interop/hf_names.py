"""Hugging Face names for every family: config keys, class names and parameter-name tables.

Templates: `{p}` is weight|bias, any other `{name}` a number (layer, group, block); `{i}` is
always the layer's depth (the loader counts a file's layers by it, hf.check_depth). Our side is
relative to the encoder (`backbone.`) or to the head (`head.`); the HF side is relative to the
family prefix (`bert.`, `roberta.`, ...) for encoder names and absolute for head names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from ..errors import BertkitError
from .bert_names import BERT_BLOCK, BERT_EMBEDDINGS, BERT_KEYS, BERT_MLM, Rules, mlm_rules
from ..models.modern import ModernConfig

HEAD_SUFFIX = {
    "Model": None,
    "ForMaskedLM": "mlm",
    "ForPreTraining": "pretraining",
    "ForSequenceClassification": "classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "qa",
    "ForMultipleChoice": "multiple-choice",
}



@dataclass(frozen=True)
class HFFamily:
    model_type: str
    class_prefix: str                 # BertForMaskedLM -> "Bert"
    encoder_prefix: str               # where a head model nests the encoder: "bert."
    config_keys: dict[str, str]       # HF config key -> our config field
    defaults: dict[str, object]       # HF's defaults for keys a config.json may omit (ours differ)
    encoder: Rules
    heads: dict[str | None, Rules]
    tokenizer_class: str
    fixed: dict[str, object] = field(default_factory=dict)  # our fields HF does not store
    ignored: tuple[str, ...] = ()     # regexes (HF names) of tensors that are not parameters
    # (output bias, decoder bias): transformers adds the decoder's bias to the MLM logits and ties
    # it to the head's own bias only when word embeddings are tied (see hf.py).
    tied_bias: tuple[str, str] | None = None
    # A second MLM weight layout (DeBERTa's lm_predictions.*), written when the config's
    # legacy_mlm is False; both layouts load.
    modern_mlm: Rules | None = None
    token_types_optional: bool = False  # whether transformers accepts type_vocab_size = 0
    # Tensor layouts that are not a rename (DeBERTa v1's fused, head-interleaved in_proj):
    # to_common rewrites a file's tensors into the names of `encoder`; from_common undoes it.
    to_common: Callable[[dict, int], dict] | None = None
    from_common: Callable[[dict, int], dict] | None = None
    # Config layouts that are not a rename (ModernBERT's nested rope_parameters): config_in
    # rewrites a config.json dict into flat keys of `config_keys`; config_out adds what
    # transformers reads beyond them.
    config_in: Callable[[dict], dict] | None = None
    config_out: Callable[[dict], dict] | None = None


BERT_LAYERS = [(f"encoder.layer.{{i}}.{hf}", f"encoder.layers.{{i}}.{ours}") for hf, ours in BERT_BLOCK]
POSITION_IDS = (r"embeddings\.position_ids", r"embeddings\.token_type_ids")  # buffers old files kept


CLASSIFIER = [("classifier.{p}", "classifier.{p}")]
QA = [("qa_outputs.{p}", "qa.{p}")]
FIRST_TOKEN = [("classifier.dense.{p}", "dense.{p}"), ("classifier.out_proj.{p}", "out_proj.{p}")]


def _nest(prefix: str, rules: Rules) -> Rules:
    return [(hf, prefix + ours) for hf, ours in rules]


BERT = HFFamily(
    model_type="bert", class_prefix="Bert", encoder_prefix="bert.", config_keys=BERT_KEYS, defaults={},
    encoder=BERT_EMBEDDINGS + BERT_LAYERS + [("pooler.dense.{p}", "pooler.dense.{p}")],
    heads={None: [], "mlm": BERT_MLM,
           "pretraining": _nest("mlm.", BERT_MLM) + [("cls.seq_relationship.{p}", "pair.classifier.{p}")],
           "classification": CLASSIFIER, "token-classification": CLASSIFIER, "qa": QA,
           "multiple-choice": CLASSIFIER},
    tokenizer_class="BertTokenizer",
    ignored=POSITION_IDS,
    tied_bias=("cls.predictions.bias", "cls.predictions.decoder.bias"),
)

ROBERTA_MLM = mlm_rules("lm_head.", "dense", "layer_norm", "decoder", "bias")
ROBERTA = HFFamily(
    model_type="roberta", class_prefix="Roberta", encoder_prefix="roberta.", config_keys=BERT_KEYS,
    defaults={"vocab_size": 50265, "pad_token_id": 1},
    encoder=BERT.encoder,
    heads={None: [], "mlm": ROBERTA_MLM, "classification": FIRST_TOKEN,
           "token-classification": CLASSIFIER, "qa": QA, "multiple-choice": CLASSIFIER},
    tokenizer_class="RobertaTokenizer",
    ignored=POSITION_IDS,
    tied_bias=("lm_head.bias", "lm_head.decoder.bias"),
)

# the same names under XLM-R's model_type and class names (its tokenizer is SentencePiece Unigram)
XLM_ROBERTA = replace(ROBERTA, model_type="xlm-roberta", class_prefix="XLMRoberta",
                      defaults={"vocab_size": 30522, "pad_token_id": 1},  # XLMRobertaConfig's
                      tokenizer_class="XLMRobertaTokenizer")
# and CamemBERT's (French RoBERTa; SentencePiece Unigram with fairseq's ids)
CAMEMBERT = replace(XLM_ROBERTA, model_type="camembert", class_prefix="Camembert", tokenizer_class="CamembertTokenizer")

ALBERT_BLOCK = [
    ("attention.query.{p}", "attn.query.{p}"),
    ("attention.key.{p}", "attn.key.{p}"),
    ("attention.value.{p}", "attn.value.{p}"),
    ("attention.dense.{p}", "attn.out_proj.{p}"),
    ("attention.LayerNorm.{p}", "attn_norm.{p}"),
    ("ffn.{p}", "ffn.up.{p}"),
    ("ffn_output.{p}", "ffn.down.{p}"),
    ("full_layer_layer_norm.{p}", "ffn_norm.{p}"),
]
ALBERT_MLM = mlm_rules("predictions.", "dense", "LayerNorm", "decoder", "bias")
ALBERT = HFFamily(
    model_type="albert", class_prefix="Albert", encoder_prefix="albert.",
    config_keys={**{k: v for k, v in BERT_KEYS.items() if k != "classifier_dropout"},
                 "classifier_dropout_prob": "classifier_dropout", "embedding_size": "embedding_size",
                 "num_hidden_groups": "num_hidden_groups", "inner_group_num": "inner_group_num"},
    defaults={"vocab_size": 30000, "embedding_size": 128, "hidden_size": 4096, "num_attention_heads": 64,
              "intermediate_size": 16384, "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0,
              "attention_probs_dropout_prob": 0.0, "classifier_dropout_prob": 0.1},
    encoder=BERT_EMBEDDINGS
    + [("encoder.embedding_hidden_mapping_in.{p}", "projection.{p}"), ("pooler.{p}", "pooler.dense.{p}")]
    + [(f"encoder.albert_layer_groups.{{g}}.albert_layers.{{j}}.{hf}", f"encoder.layers.{{g}}.{{j}}.{ours}")
       for hf, ours in ALBERT_BLOCK],
    heads={None: [], "mlm": ALBERT_MLM,
           "pretraining": _nest("mlm.", ALBERT_MLM) + [("sop_classifier.classifier.{p}", "pair.classifier.{p}")],
           "classification": CLASSIFIER, "token-classification": CLASSIFIER, "qa": QA,
           "multiple-choice": CLASSIFIER},
    tokenizer_class="AlbertTokenizer",
    ignored=POSITION_IDS,
    tied_bias=("predictions.bias", "predictions.decoder.bias"),
)

DISTILBERT_BLOCK = [
    ("attention.q_lin.{p}", "attn.query.{p}"),
    ("attention.k_lin.{p}", "attn.key.{p}"),
    ("attention.v_lin.{p}", "attn.value.{p}"),
    ("attention.out_lin.{p}", "attn.out_proj.{p}"),
    ("sa_layer_norm.{p}", "attn_norm.{p}"),
    ("ffn.lin1.{p}", "ffn.up.{p}"),
    ("ffn.lin2.{p}", "ffn.down.{p}"),
    ("output_layer_norm.{p}", "ffn_norm.{p}"),
]
# Its sentence classifier, for one label set or for one score per choice.
DISTILBERT_CLASSIFIER = [("pre_classifier.{p}", "dense.{p}"), ("classifier.{p}", "out_proj.{p}")]
DISTILBERT = HFFamily(
    model_type="distilbert", class_prefix="DistilBert", encoder_prefix="distilbert.",
    config_keys={"vocab_size": "vocab_size", "dim": "hidden_size", "n_layers": "num_layers",
                 "n_heads": "num_heads", "hidden_dim": "intermediate_size", "activation": "hidden_act",
                 "max_position_embeddings": "max_positions", "pad_token_id": "pad_token_id",
                 "dropout": "hidden_dropout", "attention_dropout": "attention_dropout",
                 "seq_classif_dropout": "classifier_dropout", "qa_dropout": "qa_dropout",
                 "sinusoidal_pos_embds": "sinusoidal_positions", "initializer_range": "initializer_range",
                 "tie_word_embeddings": "tie_word_embeddings"},
    defaults={"n_layers": 6, "dim": 768, "hidden_dim": 3072, "seq_classif_dropout": 0.2},
    fixed={"layer_norm_eps": 1e-12, "type_vocab_size": 0},
    encoder=BERT_EMBEDDINGS[:2] + [("embeddings.LayerNorm.{p}", "embeddings.norm.{p}")]
    + [(f"transformer.layer.{{i}}.{hf}", f"encoder.layers.{{i}}.{ours}") for hf, ours in DISTILBERT_BLOCK],
    heads={None: [],
           "mlm": [("vocab_transform.{p}", "transform.{p}"), ("vocab_layer_norm.{p}", "norm.{p}"),
                   ("vocab_projector.bias", "bias"), ("vocab_projector.weight", "decoder.weight")],
           "classification": DISTILBERT_CLASSIFIER, "token-classification": CLASSIFIER, "qa": QA,
           "multiple-choice": DISTILBERT_CLASSIFIER},
    tokenizer_class="DistilBertTokenizer",
    ignored=POSITION_IDS,
)

# ELECTRA's discriminator head; DeBERTa-v3's pre-training discriminator reuses it (and its names:
# transformers has no DebertaV2ForPreTraining, so loading such a file there reports them unused).
REPLACED_TOKEN = [("discriminator_predictions.dense.{p}", "dense.{p}"),
                  ("discriminator_predictions.dense_prediction.{p}", "score.{p}")]


def electra_config_in(hf: dict) -> dict:
    """transformers' sequence summary takes no activation for None or "" ("linear" here)."""
    if "summary_activation" in hf:
        return {**hf, "summary_activation": hf["summary_activation"] or "linear"}
    return hf


ELECTRA = HFFamily(
    model_type="electra", class_prefix="Electra", encoder_prefix="electra.",
    config_keys={**BERT_KEYS, "embedding_size": "embedding_size", "summary_type": "summary_type",
                 "summary_use_proj": "summary_dense", "summary_activation": "summary_act",
                 "summary_first_dropout": "summary_first_dropout", "summary_last_dropout": "summary_last_dropout"},
    defaults={"embedding_size": 128, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024},
    encoder=BERT_EMBEDDINGS + [("embeddings_project.{p}", "projection.{p}")] + BERT_LAYERS,
    heads={None: [],
           "mlm": [("generator_predictions.dense.{p}", "transform.{p}"),
                   ("generator_predictions.LayerNorm.{p}", "norm.{p}"),
                   ("generator_lm_head.bias", "bias"), ("generator_lm_head.weight", "decoder.weight")],
           "pretraining": REPLACED_TOKEN,
           "classification": FIRST_TOKEN, "token-classification": CLASSIFIER, "qa": QA,
           "multiple-choice": [("sequence_summary.summary.{p}", "dense.{p}"), ("classifier.{p}", "out_proj.{p}")]},
    tokenizer_class="ElectraTokenizer",
    ignored=POSITION_IDS,
    config_in=electra_config_in,
)

# bertkit's enhanced mask decoder (transformers has none, and ignores this tensor and config key).
EMD = [("enhanced_mask_decoder.position_embeddings.weight", "position.weight")]
# E_Delta of DeBERTa-v3's gradient-disentangled embedding sharing (objectives/gdes.py), written
# beside the merged table E_G + E_Delta so that a resumed pre-training run restores it exactly.
# A model without GDES (bertkit's plain discriminator, transformers) ignores it.
GDES_DELTA = [(f"embeddings.{table}_embeddings.gdes_delta", f"embeddings.{ours}.delta")
              for table, ours in (("word", "word"), ("position", "position"), ("token_type", "token_type"))]
DEBERTA_V2_BLOCK = [("attention.self.query_proj.{p}", "attn.query.{p}"),
                    ("attention.self.key_proj.{p}", "attn.key.{p}"),
                    ("attention.self.value_proj.{p}", "attn.value.{p}"),
                    ("attention.self.pos_key_proj.{p}", "attn.pos_key.{p}"),
                    ("attention.self.pos_query_proj.{p}", "attn.pos_query.{p}")] + BERT_BLOCK[3:]


def deberta_config_in(hf: dict) -> dict:
    """transformers' newer MLM layout (legacy False, lm_predictions.*) has no decoder of its own:
    it multiplies by the word embeddings whatever tie_word_embeddings says."""
    if hf.get("legacy") is False:
        return {**hf, "tie_word_embeddings": True}
    return hf


# DeBERTa's "context pooler" classifier, for one label set or for one score per choice.
CONTEXT_POOLER = [("pooler.dense.{p}", "dense.{p}"), ("classifier.{p}", "out_proj.{p}")]
DEBERTA_V2 = HFFamily(
    model_type="deberta-v2", class_prefix="DebertaV2", encoder_prefix="deberta.",
    config_keys={**{k: v for k, v in BERT_KEYS.items() if k != "classifier_dropout"},
                 "cls_dropout": "classifier_dropout", "embedding_size": "embedding_size",
                 "position_biased_input": "position_biased_input", "relative_attention": "relative_attention",
                 "max_relative_positions": "max_relative_positions", "position_buckets": "position_buckets",
                 "pos_att_type": "pos_att_type", "share_att_key": "share_att_key", "norm_rel_ebd": "norm_rel_ebd",
                 "conv_kernel_size": "conv_kernel_size", "conv_act": "conv_act", "conv_groups": "conv_groups",
                 "pooler_hidden_act": "pooler_act", "pooler_dropout": "pooler_dropout", "legacy": "legacy_mlm",
                 "enhanced_mask_decoder": "enhanced_mask_decoder"},
    # DebertaV2Config's own defaults (xxlarge sizes, v1-style attention) for keys a file omits.
    defaults={"hidden_size": 1536, "num_hidden_layers": 24, "num_attention_heads": 24, "intermediate_size": 6144,
              "relative_attention": False, "position_biased_input": True, "pos_att_type": (),
              "position_buckets": -1, "share_att_key": False, "norm_rel_ebd": "none"},
    encoder=[("embeddings.word_embeddings.weight", "embeddings.word.weight"),
             ("embeddings.position_embeddings.weight", "embeddings.position.weight"),
             ("embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"),
             ("embeddings.embed_proj.weight", "embeddings.projection.weight"),
             ("embeddings.LayerNorm.{p}", "embeddings.norm.{p}"),
             ("encoder.rel_embeddings.weight", "encoder.rel_embeddings.weight"),
             ("encoder.LayerNorm.{p}", "encoder.rel_norm.{p}"),
             ("encoder.conv.conv.{p}", "encoder.conv.conv.{p}"),
             ("encoder.conv.LayerNorm.{p}", "encoder.conv.norm.{p}")] + GDES_DELTA
    + [(f"encoder.layer.{{i}}.{hf}", f"encoder.layers.{{i}}.{ours}") for hf, ours in DEBERTA_V2_BLOCK],
    heads={None: [], "mlm": BERT_MLM + EMD, "pretraining": REPLACED_TOKEN,
           "classification": CONTEXT_POOLER, "token-classification": CLASSIFIER, "qa": QA,
           "multiple-choice": CONTEXT_POOLER},
    modern_mlm=[("lm_predictions.lm_head.dense.{p}", "transform.{p}"),
                ("lm_predictions.lm_head.LayerNorm.{p}", "norm.{p}"),
                ("lm_predictions.lm_head.bias", "bias")] + EMD,
    tokenizer_class="DebertaV2Tokenizer",
    token_types_optional=True,
    # Released v3 files keep an unused absolute-position table; MLM files the EMD's weights.
    # transformers builds the position table's norm even without relative attention (unused).
    ignored=POSITION_IDS + (r"embeddings\.position_embeddings\.weight", r"mask_predictions\..*",
                            r"embeddings\.\w+_embeddings\.gdes_delta", r"encoder\.LayerNorm\.(weight|bias)"),
    tied_bias=("cls.predictions.bias", "cls.predictions.decoder.bias"),
    config_in=deberta_config_in,
)

V1_ATTENTION = re.compile(r"(.*encoder\.layer\.\d+\.attention\.self\.)(in_proj\.weight|q_bias|v_bias|pos_proj\.weight"
                          r"|pos_q_proj\.weight|pos_q_proj\.bias)$")
V1_RENAMES = {"q_bias": "query_proj.bias", "v_bias": "value_proj.bias", "pos_proj.weight": "pos_key_proj.weight",
              "pos_q_proj.weight": "pos_query_proj.weight", "pos_q_proj.bias": "pos_query_proj.bias"}


def deberta_v1_to_common(state: dict, num_heads: int) -> dict:
    """v1 stores Q, K, V as one (3H, H) matrix, interleaved per head: rows h*3D .. h*3D+D are head
    h's query, the next D its key, then its value. Split it into v2's three projections."""
    out = {}
    for name, tensor in state.items():
        m = V1_ATTENTION.match(name)
        if m is None:
            out[name] = tensor
        elif m.group(2) == "in_proj.weight":
            H = tensor.shape[1]
            q, k, v = tensor.view(num_heads, 3, -1, H).unbind(1)  # 3 x (N, D, H)
            for part, w in zip(("query_proj", "key_proj", "value_proj"), (q, k, v)):
                out[f"{m.group(1)}{part}.weight"] = w.reshape(-1, H)
        else:
            out[m.group(1) + V1_RENAMES[m.group(2)]] = tensor
    return out


def deberta_v1_from_common(state: dict, num_heads: int) -> dict:
    out = {}
    inverse = {v: k for k, v in V1_RENAMES.items()}
    for name, tensor in state.items():
        m = re.match(r"(.*attention\.self\.)(query_proj|key_proj|value_proj|pos_key_proj|pos_query_proj)\."
                     r"(weight|bias)$", name)
        if m is None:
            out[name] = tensor
        elif m.group(2) + "." + m.group(3) in inverse:
            out[m.group(1) + inverse[m.group(2) + "." + m.group(3)]] = tensor
        elif m.group(3) == "weight" and m.group(2) == "query_proj":
            q, k, v = (state[f"{m.group(1)}{p}.weight"] for p in ("query_proj", "key_proj", "value_proj"))
            H = q.shape[1]
            stacked = torch.stack([w.view(num_heads, -1, H) for w in (q, k, v)], dim=1)  # (N, 3, D, H)
            out[m.group(1) + "in_proj.weight"] = stacked.reshape(-1, H)
    return out


V2_TENSORS = re.compile(r".*(attention\.self\.key_proj\.bias|encoder\.conv\..*)$")  # v1 has neither


def deberta_version_of(name: str) -> str | None:
    """The DeBERTa whose files alone hold a tensor of this name (both name theirs `deberta.*`):
    v1's fused Q/K/V and its biases, v2's key bias and convolution; None where either may."""
    return "deberta" if V1_ATTENTION.match(name) else "deberta-v2" if V2_TENSORS.match(name) else None


V2_ONLY = ("position_buckets", "share_att_key", "norm_rel_ebd", "conv_kernel_size", "conv_act", "conv_groups")
DEBERTA = replace(
    DEBERTA_V2, model_type="deberta", class_prefix="Deberta",
    config_keys={k: v for k, v in DEBERTA_V2.config_keys.items() if k not in V2_ONLY},
    defaults={"vocab_size": 50265, "relative_attention": False, "position_biased_input": True, "pos_att_type": ()},
    heads={k: v for k, v in DEBERTA_V2.heads.items() if k != "multiple-choice"},  # no DebertaForMultipleChoice
    tokenizer_class="DebertaTokenizer",
    to_common=deberta_v1_to_common, from_common=deberta_v1_from_common,
)


MODERN_QKV = re.compile(r"(.*layers\.\d+\.attn\.)Wqkv\.(weight|bias)$")


def modernbert_to_common(state: dict, num_heads: int) -> dict:
    """ModernBERT stores Q, K, V as one (3H, H) Wqkv: its first H rows are the queries, then
    the keys, then the values. Split it into three."""
    out = {}
    for name, tensor in state.items():
        m = MODERN_QKV.match(name)
        if m is None:
            out[name] = tensor
            continue
        for part, piece in zip(("query", "key", "value"), tensor.chunk(3, dim=0)):
            out[f"{m.group(1)}{part}.{m.group(2)}"] = piece
    return out


def modernbert_from_common(state: dict, num_heads: int) -> dict:
    out = {}
    for name, tensor in state.items():
        m = re.match(r"(.*layers\.\d+\.attn\.)(query|key|value)\.(weight|bias)$", name)
        if m is None:
            out[name] = tensor
        elif m.group(2) == "query":
            parts = [state[f"{m.group(1)}{p}.{m.group(3)}"] for p in ("query", "key", "value")]
            out[f"{m.group(1)}Wqkv.{m.group(3)}"] = torch.cat(parts)
    return out


ROPE_KEYS = {"full_attention": "global_rope_theta", "sliding_attention": "local_rope_theta"}
LAYER_TYPES = {"full_attention": "global", "sliding_attention": "local"}  # transformers' -> ModernConfig's
HF_LAYER_TYPES = {ours: theirs for theirs, ours in LAYER_TYPES.items()}


def modernbert_config_in(hf: dict) -> dict:
    """transformers 5 nests the RoPE bases in rope_parameters ({layer type: {rope_type,
    rope_theta}}); older files have global_rope_theta / local_rope_theta. Only plain RoPE is
    implemented: a scaled one would silently compute something else."""
    hf = dict(hf)
    if "local_rope_theta" in hf and hf["local_rope_theta"] is None:  # transformers 4: the global base
        hf["local_rope_theta"] = hf.get("global_rope_theta", ModernConfig.global_rope_theta)
    if "layer_types" in hf and hf["layer_types"] is None:  # null: from the period, as transformers builds them
        del hf["layer_types"]
    if hf.get("layer_types") is not None:
        if not hf.get("global_attn_every_n_layers", 1):  # 0 or null beside layer_types: unread, as in transformers 5
            hf.pop("global_attn_every_n_layers")
        unknown = sorted({t for t in hf["layer_types"] if t not in LAYER_TYPES}, key=str)
        if unknown:
            raise BertkitError(f"unknown layer type(s) {', '.join(map(repr, unknown))} in layer_types; "
                               f"bertkit knows {', '.join(LAYER_TYPES)}")
        hf["layer_types"] = [LAYER_TYPES[t] for t in hf["layer_types"]]
    if hf.get("rope_scaling"):
        raise BertkitError(f"rope_scaling {hf['rope_scaling']!r} is not supported (only plain rotary embeddings)")
    for kind, params in (hf.pop("rope_parameters", None) or {}).items():
        if kind not in ROPE_KEYS or not isinstance(params, dict):
            raise BertkitError(f"rope_parameters: unknown entry {kind!r}")
        if params.get("rope_type", "default") != "default":
            raise BertkitError(f"rope_parameters.{kind}: rope_type {params['rope_type']!r} is not supported "
                               "(only 'default')")
        if "rope_theta" in params:
            theta = params["rope_theta"]
            if not isinstance(theta, (int, float)) or isinstance(theta, bool):  # named as the file nests it
                raise BertkitError(f"rope_parameters.{kind}.rope_theta must be a number, got {theta!r}")
            hf[ROPE_KEYS[kind]] = theta
    return hf


def modernbert_config_out(hf: dict) -> dict:
    """Both layouts of the RoPE bases, and every layer's type spelled out (transformers 5 reads
    layer_types; 4.x only global_attn_every_n_layers, written where it gives the same layers)."""
    hf = dict(hf)
    hf["rope_parameters"] = {kind: {"rope_type": "default", "rope_theta": hf[key]} for kind, key in ROPE_KEYS.items()}
    # transformers' defaults for these ids (unused by the encoder) lie in the released
    # vocabulary; for a smaller one, write none instead of ids it would warn about.
    for key, default in (("bos_token_id", 50281), ("cls_token_id", 50281), ("eos_token_id", 50282),
                         ("sep_token_id", 50282)):
        if default >= hf["vocab_size"]:
            hf[key] = None
    every = hf["global_attn_every_n_layers"]
    periodic = [("global", "local")[bool(i % every)] for i in range(hf["num_hidden_layers"])]
    ours = hf["layer_types"] or periodic
    if ours != periodic:  # transformers 4 reads only the period, and would build other layers: leave it out
        del hf["global_attn_every_n_layers"]
    hf["layer_types"] = [HF_LAYER_TYPES[t] for t in ours]
    return hf


MODERNBERT_BLOCK = [
    ("attn_norm.{p}", "attn_norm.{p}"),
    ("attn.query.{p}", "attn.query.{p}"),  # Wqkv, split (modernbert_to_common)
    ("attn.key.{p}", "attn.key.{p}"),
    ("attn.value.{p}", "attn.value.{p}"),
    ("attn.Wo.{p}", "attn.out_proj.{p}"),
    ("mlp_norm.{p}", "ffn_norm.{p}"),
    ("mlp.Wi.{p}", "ffn.up.{p}"),
    ("mlp.Wo.{p}", "ffn.down.{p}"),
]
MODERNBERT_CLASSIFIER = [("head.dense.{p}", "dense.{p}"), ("head.norm.{p}", "norm.{p}"),
                         ("classifier.{p}", "classifier.{p}")]
MODERNBERT = HFFamily(
    model_type="modernbert", class_prefix="ModernBert", encoder_prefix="model.",
    config_keys={"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
                 "num_attention_heads": "num_heads", "intermediate_size": "intermediate_size",
                 "hidden_activation": "hidden_act", "max_position_embeddings": "max_positions",
                 "norm_eps": "layer_norm_eps", "pad_token_id": "pad_token_id",
                 "embedding_dropout": "hidden_dropout", "attention_dropout": "attention_dropout",
                 "classifier_dropout": "classifier_dropout", "initializer_range": "initializer_range",
                 "tie_word_embeddings": "tie_word_embeddings", "global_attn_every_n_layers": "global_every",
                 "layer_types": "layer_types", "global_rope_theta": "global_rope_theta",
                 "local_rope_theta": "local_rope_theta", "local_attention": "local_attention",
                 "attention_bias": "attention_bias", "mlp_bias": "mlp_bias", "norm_bias": "norm_bias",
                 "mlp_dropout": "mlp_dropout", "classifier_pooling": "classifier_pooling",
                 "classifier_activation": "classifier_activation", "classifier_bias": "classifier_bias",
                 "decoder_bias": "decoder_bias"},
    # ModernBertConfig's defaults, where they differ from ModernConfig's: none (the same values).
    defaults={},
    fixed={"type_vocab_size": 0, "norm_first": True},
    encoder=[("embeddings.tok_embeddings.weight", "embeddings.word.weight"),
             ("embeddings.norm.{p}", "embeddings.norm.{p}"),
             ("final_norm.{p}", "encoder.final_norm.{p}")]
    + [(f"layers.{{i}}.{hf}", f"encoder.layers.{{i}}.{ours}") for hf, ours in MODERNBERT_BLOCK],
    heads={None: [],
           "mlm": [("head.dense.{p}", "transform.{p}"), ("head.norm.{p}", "norm.{p}"),
                   ("decoder.bias", "bias"), ("decoder.weight", "decoder.weight")],
           "classification": MODERNBERT_CLASSIFIER, "token-classification": MODERNBERT_CLASSIFIER,
           "qa": MODERNBERT_CLASSIFIER, "multiple-choice": MODERNBERT_CLASSIFIER},
    tokenizer_class="PreTrainedTokenizerFast",
    token_types_optional=True,
    to_common=modernbert_to_common, from_common=modernbert_from_common,
    config_in=modernbert_config_in, config_out=modernbert_config_out,
)

FAMILIES = {f.model_type: f for f in (BERT, ROBERTA, XLM_ROBERTA, CAMEMBERT, ALBERT, DISTILBERT, ELECTRA, DEBERTA_V2, DEBERTA, MODERNBERT)}
