"""Tests of openbook.models.encoders on tiny random encoders (and one test on the packaged MiniLM)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertModel, DPRContextEncoder, DPRQuestionEncoder

from openbook.errors import InputError, ModelLoadError
from openbook.models import Encoder, load_encoder
from openbook.models.tensors import weights_fingerprint
from tiny_encoders import save_bert, save_dpr, save_sentence_transformers
from tolerance import model_tolerance, tolerance

QUESTIONS = ["who wrote hamlet ?", "the capital of france", "when was the first nobel prize in physics"]
PASSAGES = [
    SimpleNamespace(title="hamlet", text="hamlet is a tragedy play . shakespeare wrote hamlet"),
    SimpleNamespace(title="", text="paris is the capital of france"),
    SimpleNamespace(title="nobel prize", text="the first nobel prize in physics was in the year"),
    SimpleNamespace(title="river", text="a river"),
    SimpleNamespace(title="ocean", text="the ocean is a sun ocean of the war of the king and queen of a country"),
]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return save_bert(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def bert(bert_dir):
    return BertModel.from_pretrained(bert_dir).eval(), AutoTokenizer.from_pretrained(bert_dir)


def single_text_states(model, tokenizer, text: str) -> torch.Tensor:
    """Token states of one text run alone (no padding): ``(tokens, hidden)``."""
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0]


def encoder_tolerance(reference, model) -> dict[str, float]:
    """The same texts through ``model`` in batches and alone: equal up to float32 rounding of the network
    (tests/helpers/tolerance.py) over at most its 64 positions."""
    return model_tolerance(reference, model.config, 64)


def test_mean_pooling_matches_manual_average_of_unpadded_tokens(bert):
    model, tokenizer = bert
    encoder = Encoder(model, tokenizer, pooling="mean", normalize=False)
    got = encoder.encode_queries(QUESTIONS, batch_size=3)
    expected = np.stack([single_text_states(model, tokenizer, q).mean(dim=0).numpy() for q in QUESTIONS])
    np.testing.assert_allclose(got, expected, **encoder_tolerance(expected, model))


def test_cls_pooling_is_first_token_state(bert):
    model, tokenizer = bert
    encoder = Encoder(model, tokenizer, pooling="cls", normalize=False)
    got = encoder.encode_queries(QUESTIONS)
    expected = np.stack([single_text_states(model, tokenizer, q)[0].numpy() for q in QUESTIONS])
    np.testing.assert_allclose(got, expected, **encoder_tolerance(expected, model))


def test_normalize_gives_unit_vectors_in_the_same_direction(bert):
    model, tokenizer = bert
    raw = Encoder(model, tokenizer, pooling="mean").encode_queries(QUESTIONS)
    unit = Encoder(model, tokenizer, pooling="mean", normalize=True).encode_queries(QUESTIONS)
    dim = unit.shape[1]  # the norm sums dim squares; the vectors are the same up to the network's rounding
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, **tolerance(1.0, terms=dim, dtype=np.float32))
    want = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(unit, want, **model_tolerance(want, model.config, 64, scale=1.0))


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_sorted_batches_give_same_embeddings_in_input_order(bert, pooling):
    encoder = Encoder(*bert, pooling=pooling)
    one_by_one = np.concatenate([encoder.encode_passages([p]) for p in PASSAGES])
    sorted_batches = encoder.encode_passages(PASSAGES, batch_size=2, sort=True)
    unsorted_batches = encoder.encode_passages(PASSAGES, batch_size=2, sort=False)
    assert sorted_batches.dtype == np.float32 and sorted_batches.shape == (len(PASSAGES), 32)
    np.testing.assert_allclose(sorted_batches, one_by_one, **encoder_tolerance(one_by_one, encoder.model))
    np.testing.assert_allclose(unsorted_batches, one_by_one, **encoder_tolerance(one_by_one, encoder.model))


def test_long_questions_are_truncated_with_one_warning(bert):
    encoder = Encoder(*bert, pooling="mean", max_length=8, name="tiny")
    long_question = "who wrote the novel " + "hamlet " * 20
    with pytest.warns(UserWarning) as caught:
        vectors = encoder.encode_queries([long_question, "who wrote hamlet", long_question + "?"])
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 1
    assert "2 question(s)" in messages[0] and "8-token" in messages[0] and "'tiny'" in messages[0]
    assert "who wrote the novel hamlet" in messages[0] and "…" in messages[0]
    truncated = encoder.tokenizer(long_question, truncation=True, max_length=8)["input_ids"]
    assert len(truncated) == 8
    kept_words = encoder.tokenizer.decode(truncated[1:-1])
    want = encoder.encode_queries([kept_words])[0]
    np.testing.assert_allclose(vectors[0], want, **encoder_tolerance(want, encoder.model))


def test_short_questions_do_not_warn(bert):
    encoder = Encoder(*bert, pooling="mean", max_length=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encoder.encode_queries(["who wrote hamlet"])


def test_forward_is_differentiable(bert_dir):
    encoder = Encoder.from_pretrained(bert_dir, pooling="mean", normalize=True)
    encoder.train()
    vectors = encoder(QUESTIONS[:2])
    assert vectors.shape == (2, 32) and vectors.requires_grad
    (vectors @ vectors.T)[0, 1].backward()
    grads = [p.grad for p in encoder.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    assert encoder.training  # encode_* must not leave it in eval mode
    encoder.encode_queries(QUESTIONS)
    assert encoder.training


def test_dpr_context_encoder_encodes_title_text_pair_without_segment_ids(tmp_path):
    folder = save_dpr(tmp_path / "ctx", role="context", projection_dim=8)
    encoder = Encoder.from_pretrained(folder)
    assert isinstance(encoder.model, DPRContextEncoder)
    assert (encoder.pooling, encoder.normalize, encoder.passage_format) == ("pooler", False, "pair")
    assert encoder.info()["dim"] == 8
    passage = PASSAGES[0]
    features = encoder.tokenize_passages([passage])[0]
    pair_ids = encoder.tokenizer(passage.title, passage.text)["input_ids"]
    assert features["input_ids"] == pair_ids and "token_type_ids" not in features
    assert pair_ids.count(encoder.tokenizer.sep_token_id) == 2
    with torch.no_grad():
        expected = encoder.model(input_ids=torch.tensor([pair_ids])).pooler_output.numpy()
    np.testing.assert_allclose(encoder.encode_passages([passage]), expected, **encoder_tolerance(expected, encoder.model))
    untitled = encoder.tokenize_passages([PASSAGES[1]])[0]["input_ids"]
    assert untitled == encoder.tokenizer(PASSAGES[1].text)["input_ids"]


def test_dpr_question_encoder_detection_and_cls_output(tmp_path):
    encoder = Encoder.from_pretrained(save_dpr(tmp_path / "q", role="question"))
    assert isinstance(encoder.model, DPRQuestionEncoder)
    assert encoder.pooling == "pooler" and not encoder.normalize
    cls = Encoder(encoder.model, encoder.tokenizer, pooling="cls").encode_queries(QUESTIONS)
    np.testing.assert_allclose(encoder.encode_queries(QUESTIONS), cls, **encoder_tolerance(cls, encoder.model))
    with pytest.raises(InputError, match="DPR"):
        Encoder(encoder.model, encoder.tokenizer, pooling="mean")


@pytest.mark.parametrize("pooling,normalize", [("mean", True), ("cls", False)])
def test_sentence_transformers_folder_settings_are_detected(tmp_path, pooling, normalize):
    folder = save_sentence_transformers(tmp_path / "st", pooling=pooling, normalize=normalize, max_seq_length=16)
    encoder = Encoder.from_pretrained(folder)
    assert (encoder.pooling, encoder.normalize, encoder.max_length) == (pooling, normalize, 16)
    assert encoder.passage_format == "joined"
    joined = encoder.encode_queries([f"{PASSAGES[0].title}. {PASSAGES[0].text}", PASSAGES[1].text])
    np.testing.assert_allclose(encoder.encode_passages(PASSAGES[:2]), joined, **encoder_tolerance(joined, encoder.model))


def test_unsupported_sentence_transformers_pooling_is_a_clear_error(tmp_path):
    folder = save_sentence_transformers(tmp_path / "st", pooling="max")
    with pytest.raises(ModelLoadError, match="pooling_mode_max_tokens"):
        Encoder.from_pretrained(folder)


def test_generic_bert_uses_cls_pair_and_info(bert_dir):
    encoder = Encoder.from_pretrained(bert_dir)
    assert encoder.info() == {
        "name": str(bert_dir),
        "pooling": "cls",
        "normalize": False,
        "dim": 32,
        "passage_format": "pair",
        "weights_sha256": weights_fingerprint(encoder.model),
    }
    assert encoder.max_length == 64  # capped by the tiny model's position embeddings
    overridden = Encoder.from_pretrained(bert_dir, pooling="mean", normalize=True, max_length=20)
    assert (overridden.pooling, overridden.normalize, overridden.max_length) == ("mean", True, 20)


def test_bad_arguments_are_input_errors(bert):
    with pytest.raises(InputError, match="pooling must be one of"):
        Encoder(*bert, pooling="max")
    encoder = Encoder(*bert)
    with pytest.raises(InputError, match="single string"):
        encoder.encode_queries("who wrote hamlet")
    with pytest.raises(InputError, match="question 1"):
        encoder.encode_queries(["ok", 3])
    with pytest.raises(InputError, match="dtype"):
        encoder.encode_queries(["ok"], dtype="float16")
    assert encoder.encode_passages([]).shape == (0, 32)


def test_bfloat16_encoding_is_close_to_float32(bert):
    encoder = Encoder(*bert, pooling="mean", normalize=True)
    fp32 = encoder.encode_passages(PASSAGES)
    bf16 = encoder.encode_passages(PASSAGES, dtype="bfloat16")
    assert bf16.dtype == np.float32
    assert np.min(np.sum(fp32 * bf16, axis=1)) > 0.99


def test_bfloat16_encoding_casts_the_linear_weights_once_with_autocasts_results(bert, monkeypatch):
    encoder = Encoder(*bert, pooling="mean", normalize=True)
    once = encoder.encode_passages(PASSAGES, dtype="bfloat16")
    copy = encoder._bfloat16_model()
    linears = [m for m in copy.modules() if type(m) is torch.nn.Linear]
    assert linears and {m.weight.dtype for m in linears} == {torch.bfloat16}
    assert {p.dtype for p in encoder.model.parameters()} == {torch.float32}  # the encoder's own weights stay
    with monkeypatch.context() as patch:  # autocast casting the float32 weights at every call, as before
        patch.setattr(encoder, "_bfloat16_model", lambda: encoder.model)
        every_call = encoder.encode_passages(PASSAGES, dtype="bfloat16")
    np.testing.assert_array_equal(once, every_call)
    with torch.no_grad():  # a weight changed in place (training q(x)) makes a new copy
        next(encoder.model.parameters()).add_(0.5)
    assert encoder._bfloat16_model() is not copy


@pytest.mark.slow
def test_packaged_minilm_gives_unit_384_vectors_and_ranks_similar_text_higher():
    encoder = load_encoder("minilm")
    expected = {"name": "minilm", "pooling": "mean", "normalize": True, "dim": 384, "passage_format": "joined",
                "weights_sha256": weights_fingerprint(encoder.model)}
    assert encoder.info() == expected
    queries = encoder.encode_queries(["Who wrote Hamlet?", "What is the capital of France?"])
    passages = encoder.encode_passages(
        [
            SimpleNamespace(title="Hamlet", text="Hamlet is a tragedy written by William Shakespeare."),
            SimpleNamespace(title="Paris", text="Paris is the capital and largest city of France."),
        ]
    )
    assert queries.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, **tolerance(1.0, terms=384, dtype=np.float32))
    scores = queries @ passages.T
    assert scores[0, 0] > scores[0, 1] and scores[1, 1] > scores[1, 0]
