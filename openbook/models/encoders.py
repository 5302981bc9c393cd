"""Dense text encoders: the query encoder q(x) and the document encoder d(z) of RAG.

:class:`Encoder` wraps any Hugging Face encoder (BERT-like models, DPR question and context encoders,
sentence-transformers folders) behind one interface: a list of texts in, one vector per text out.

How a vector is made from the token states (``pooling``):

* ``"mean"`` -- average of the token states under the attention mask (sentence-transformers models);
* ``"cls"`` -- the state of the first token (BERT-style encoders);
* ``"pooler"`` -- the model's own ``pooler_output`` (for DPR this is the CLS state, plus the optional
  projection, exactly as DPR scores with it).

How a passage (title + text) is written before encoding (``passage_format``):

* ``"pair"`` -- the tokenizer's sentence pair ``[CLS] title [SEP] text [SEP]``, as DPR encodes passages.
  For DPR models the segment ids are left all zero, as DPR's own code does.
* ``"joined"`` -- one string ``f"{title}. {text}"``; used for sentence-transformers models, which were
  trained on single strings and have no notion of a second segment.

In both formats a passage without a title is encoded as its text alone.

Encoding is fast on CPU because texts are tokenized once, sorted by token length and batched with texts
of similar length (padding only to the longest text of each batch); results come back in input order.
"""

from __future__ import annotations

import copy
import warnings
from contextlib import contextmanager
from typing import Iterator, Protocol, Sequence

import numpy as np
import torch
from transformers import AutoConfig, AutoTokenizer

from openbook.errors import InputError, positive_int
from openbook.models.device import module_device
from openbook.models.encoder_settings import detect_settings, model_class
from openbook.models.tensors import Features, pad_features, pool, weights_fingerprint

POOLINGS = ("mean", "cls", "pooler")
PASSAGE_FORMATS = ("pair", "joined")
COMPUTE_DTYPES = ("float32", "bfloat16", "int8")
MAX_LENGTH_CAP = 512
# Passages per forward pass of encode_passages (length-sorted, so a batch's passages have nearly one length).
# Smaller batches keep a layer's activations in cache. all-MiniLM-L6-v2 on 1,000 demo passages, 2 AVX-512 cores
# (`PYTHONPATH=. .venv/bin/python bench/build_throughput.py`, docs/logs/build_throughput.txt), passages/s at 16 vs 64:
# float32 80.4 vs 74.8, int8 190.1 vs 151.4, bfloat16 124.5 vs 130.3.
PASSAGE_BATCH = 16
NORMALIZED_SCORE_SCALE = 20.0


def default_score_scale(encoder) -> float:
    """The default multiplier of d(z)^T q(x) before the softmax that gives the retriever prior p(z|x).

    DPR's unnormalised vectors use 1. With L2-normalised encoders the scores are cosines in [-1, 1], so
    p(z|x) would be nearly uniform: the default there is :data:`NORMALIZED_SCORE_SCALE` (20).
    """
    return NORMALIZED_SCORE_SCALE if getattr(encoder, "normalize", False) else 1.0


class PassageLike(Protocol):
    """Anything with a title and a text, such as ``openbook.corpus`` passages."""

    title: str
    text: str


class Encoder(torch.nn.Module):
    """A transformers encoder plus pooling and optional L2 normalisation.

    Args:
        model: the transformers encoder (``AutoModel``, ``DPRQuestionEncoder``, ...).
        tokenizer: its tokenizer.
        pooling: ``"mean"``, ``"cls"`` or ``"pooler"`` (see the module docstring).
        normalize: L2-normalise each vector (then inner product = cosine similarity).
        max_length: longest input in tokens; default the tokenizer's ``model_max_length`` capped at 512.
        name: the alias, hub name or path the encoder was loaded from (kept in knowledge-base manifests).
        passage_format: ``"pair"`` or ``"joined"``; default ``"joined"`` for mean pooling, else ``"pair"``.
        dtype: compute type of ``encode_queries``/``encode_passages``: ``"float32"``, ``"bfloat16"`` (CPU
            autocast) or ``"int8"`` (a dynamically quantised copy of the model, x86 CPUs:
            :func:`openbook.models.precision.quantize_int8`). ``forward`` (training) always runs in float32.
            float32 is the default because bfloat16 measured slower on CPU without AMX and reordered some
            top-5 results (``bench/encode_speed.py``); int8 encodes faster than float32
            on an AVX2 CPU and keeps NQ gold recall@5 (``bench/build_throughput.py``). Any of them can also
            run compiled (``encode_passages(compile=True)``, ``kb build --compile``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        pooling: str = "mean",
        normalize: bool = False,
        max_length: int | None = None,
        name: str = "",
        passage_format: str | None = None,
        dtype: str = "float32",
    ):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.pooling = _check_choice("pooling", pooling, POOLINGS)
        self.normalize = bool(normalize)
        self.max_length = int(max_length) if max_length else default_max_length(tokenizer, model.config)
        self.name = str(name)
        default_format = "joined" if pooling == "mean" else "pair"
        self.passage_format = _check_choice("passage_format", passage_format or default_format, PASSAGE_FORMATS)
        self.compute_dtype = _check_choice("dtype", dtype, COMPUTE_DTYPES)
        self.is_dpr = getattr(model.config, "model_type", None) == "dpr"
        self.weights_sha256 = weights_fingerprint(model)  # of the weights as loaded (training does not change it)
        self.train(model.training)  # start in the wrapped model's mode (eval after from_pretrained)
        if self.is_dpr and pooling == "mean":
            raise InputError(
                f"encoder {self.name!r}: DPR models only give the CLS vector; use pooling 'cls' or 'pooler'"
            )

    # ----------------------------------------------------------------------------------- public API

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        pooling: str | None = None,
        normalize: bool | None = None,
        max_length: int | None = None,
        *,
        name: str | None = None,
        dtype: str = "float32",
        **hf_kwargs,
    ) -> "Encoder":
        """Load an encoder and detect how it pools, normalises and formats passages.

        Detection: a sentence-transformers folder (``modules.json``) gives its pooling mode, whether it
        has a ``Normalize`` module and its ``max_seq_length``; a DPR model (``model_type`` "dpr") uses
        ``"pooler"`` pooling without normalisation; any other model uses ``"cls"`` without
        normalisation. Explicit ``pooling``/``normalize``/``max_length`` override what is detected.

        Weights load as float32 (the query encoder trains). ``hf_kwargs`` (e.g. ``local_files_only=True``)
        go to the transformers ``from_pretrained`` calls.
        :func:`openbook.models.load_encoder` adds the offline aliases and a clear error for hub names
        that cannot be loaded offline; prefer it.
        """
        source = str(name_or_path)
        config = AutoConfig.from_pretrained(source, trust_remote_code=False, **hf_kwargs)
        detected = detect_settings(source, config, hf_kwargs)
        model = model_class(config).from_pretrained(source, dtype=torch.float32, trust_remote_code=False, **hf_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, **hf_kwargs)
        return cls(
            model,
            tokenizer,
            pooling=pooling or detected["pooling"],
            normalize=detected["normalize"] if normalize is None else normalize,
            max_length=max_length or detected["max_length"],
            name=name or source,
            passage_format=detected["passage_format"],
            dtype=dtype,
        )

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        """Encode questions into a differentiable ``(n, d)`` tensor (the trainable query encoder q(x)).

        Questions longer than ``max_length`` tokens are truncated, with one warning per call.
        """
        features = self._tokenize_questions(texts)
        return self._embed(features)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64, dtype: str | None = None) -> np.ndarray:
        """Encode questions without gradients; ``(n, d)`` float32 array in input order."""
        return self._encode(self._tokenize_questions(texts), batch_size, dtype)

    def encode_passages(
        self,
        passages: Sequence[PassageLike],
        batch_size: int = PASSAGE_BATCH,
        progress: bool = False,
        dtype: str | None = None,
        sort: bool = True,
        compile: bool = False,
    ) -> np.ndarray:
        """Encode passages (objects with ``.title`` and ``.text``) as the document encoder d(z).

        Returns a ``(n, d)`` float32 array in input order. Passages longer than ``max_length`` tokens
        are truncated silently (the usual practice for 100-word passages). ``sort=False`` batches in
        input order instead of by length (slower; kept for benchmarks and checks). ``compile=True`` runs a
        TorchInductor-compiled copy of the model (:func:`openbook.models.precision.compile_for_inference`;
        int8 through export and torchao's x86 quantiser), compiled on the first call (tens of seconds) and kept for the next ones: for
        corpora, where int8 encodes fastest this way (``bench/build_throughput.py``).
        """
        return self._encode(self.tokenize_passages(passages), batch_size, dtype, progress, sort, compile)

    @property
    def dim(self) -> int:
        """Size of the output vectors."""
        config = self.model.config
        projection = getattr(config, "projection_dim", 0) or 0
        if self.pooling != "mean" and projection > 0:
            return int(projection)
        for attribute in ("hidden_size", "d_model", "dim"):
            if getattr(config, attribute, None):
                return int(getattr(config, attribute))
        return int(self.encode_queries(["dimension probe"]).shape[1])

    def info(self) -> dict:
        """Settings that must match between the encoder that built an index and the one querying it.

        ``weights_sha256`` (:func:`weights_fingerprint`) is that of the weights the encoder was loaded
        with, so the same folder with other weights is told apart, while a query encoder fine-tuned from
        the document encoder (RAG trains q(x), not d(z)) still matches the knowledge base.
        """
        return {
            "name": self.name,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "dim": self.dim,
            "passage_format": self.passage_format,
            "weights_sha256": self.weights_sha256,
        }

    # ----------------------------------------------------------------------------------- tokenizing

    def _tokenize(self, first: list[str], second: list[str] | None = None, limit: int | None = None) -> list[Features]:
        """Tokenize without padding, truncating to ``limit`` (default ``max_length``); one dict per text."""
        if not first:
            return []
        encoded = self.tokenizer(first, second, truncation=True, max_length=limit or self.max_length)
        keys = [key for key in ("input_ids", "attention_mask", "token_type_ids") if key in encoded]
        if self.is_dpr:  # DPR encodes with all-zero segment ids
            keys = [key for key in keys if key != "token_type_ids"]
        return [{key: encoded[key][i] for key in keys} for i in range(len(first))]

    def _tokenize_questions(self, texts: Sequence[str]) -> list[Features]:
        """Tokenize questions, truncating to ``max_length`` with one warning if any were too long.

        Texts are tokenized with one token to spare, so a length over ``max_length`` reveals a question
        that needs truncating; only those are tokenized again.
        """
        texts = _check_texts(texts)
        features = self._tokenize(texts, limit=self.max_length + 1)
        too_long = [i for i, feature in enumerate(features) if len(feature["input_ids"]) > self.max_length]
        if too_long:
            warnings.warn(
                f"{len(too_long)} question(s) longer than the {self.max_length}-token limit of encoder "
                f"{self.name!r} were truncated, e.g. {_shorten(texts[too_long[0]])!r}",
                stacklevel=3,
            )
            for i, feature in zip(too_long, self._tokenize([texts[i] for i in too_long])):
                features[i] = feature
        return features

    def tokenize_passages(self, passages: Sequence[PassageLike]) -> list[Features]:
        """Tokenize passages in ``passage_format`` without padding; one feature dict per passage, in order."""
        titled = [i for i, p in enumerate(passages) if (p.title or "").strip()]
        untitled = [i for i, p in enumerate(passages) if not (p.title or "").strip()]
        if self.passage_format == "pair":
            titled_features = self._tokenize([passages[i].title for i in titled], [passages[i].text for i in titled])
        else:
            titled_features = self._tokenize([f"{passages[i].title}. {passages[i].text}" for i in titled])
        untitled_features = self._tokenize([passages[i].text for i in untitled])
        features: list[Features] = [{}] * len(passages)
        for i, feature in zip(titled + untitled, titled_features + untitled_features):
            features[i] = feature
        return features

    # ----------------------------------------------------------------------------------- encoding

    def _encode(
        self, features: list[Features], batch_size: int, dtype: str | None, progress: bool = False, sort: bool = True,
        compile: bool = False,
    ) -> np.ndarray:
        """Embed without gradients in length-sorted batches, on the model's :attr:`device`; rows come back in
        input order, as a numpy array on the host."""
        batch_size = positive_int(batch_size, "batch_size")
        if not features:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = list(range(len(features)))
        if sort:  # longest first, so similar lengths share a batch and padding stays small
            order.sort(key=lambda i: len(features[i]["input_ids"]), reverse=True)
        batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
        parts = []
        dtype = dtype or self.compute_dtype
        if compile:
            model = self._compiled_model(dtype)
        elif dtype == "int8":
            model = self._int8_model()
        elif dtype == "bfloat16":
            model = self._bfloat16_model()
        else:
            model = self.model
        with self._inference(dtype):
            for batch in _progress(batches, progress):
                rows = [features[i] for i in batch]
                # a compiled model's shapes are symbolic, but size 1 is specialised: a lone last row would
                # compile a second graph, so it goes twice
                vectors = self._embed(rows * 2 if compile and len(rows) == 1 else rows, model)[: len(rows)]
                parts.append(vectors.float().cpu().numpy())
        out = np.empty((len(features), parts[0].shape[1]), dtype=np.float32)
        out[order] = np.concatenate(parts)
        return out

    def _embed(self, features: list[Features], model: torch.nn.Module | None = None) -> torch.Tensor:
        """Run the model (or ``model``, its int8 or compiled copy) on a batch of tokenized texts and pool (and normalise)."""
        inputs = pad_features(features, self.tokenizer.pad_token_id or 0, self.tokenizer.padding_side)
        inputs = {key: value.to(self.device) for key, value in inputs.items()}
        outputs = (self.model if model is None else model)(**inputs)
        vectors = pool(outputs, inputs["attention_mask"], self.pooling)
        if self.normalize:
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=-1)
        return vectors

    @property
    def device(self) -> torch.device:
        """Device of the model's parameters: inputs are moved there, vectors come back to the host."""
        return module_device(self.model)

    def _int8_model(self) -> torch.nn.Module:
        """A dynamically quantised copy of the model for ``dtype="int8"`` encoding (:meth:`_model_copy`). int8
        where it cannot run is a one-line error."""
        from openbook.models.precision import quantize_int8, resolve_dtype

        resolve_dtype("int8", self.device.type)
        return self._model_copy(("int8",), quantize_int8)

    def _bfloat16_model(self) -> torch.nn.Module:
        """A copy of the model with its linear layers' weights in bfloat16 for ``dtype="bfloat16"`` encoding
        (:func:`openbook.models.precision.bfloat16_linears`, kept by :meth:`_model_copy`): autocast's results
        without casting the weights at every batch."""
        from openbook.models.precision import bfloat16_linears

        return self._model_copy(("bfloat16",), bfloat16_linears)

    def _compiled_model(self, dtype: str) -> torch.nn.Module:
        """A compiled copy of the model for ``dtype`` (:func:`openbook.models.precision.compile_for_inference`,
        kept by :meth:`_model_copy`)."""
        from openbook.models.precision import compile_for_inference, resolve_dtype

        resolve_dtype(dtype, self.device.type)
        return self._model_copy(("compiled", dtype), lambda model: compile_for_inference(model, dtype))

    def _model_copy(self, key: tuple, build) -> torch.nn.Module:
        """``build`` applied to a copy of the model in eval mode, made on first use and again whenever a weight
        changed in place since (training q(x)); kept outside the module tree (a plain dict attribute), so it is
        never saved, moved or trained."""
        version = tuple(p._version for p in self.model.parameters())
        copies = self.__dict__.setdefault("_model_copies", {})
        if key not in copies or copies[key][0] != version:
            copies[key] = (version, build(copy.deepcopy(self.model).eval()))
        return copies[key][1]

    @contextmanager
    def _inference(self, dtype: str) -> Iterator[None]:
        """Eval mode, no gradients and the requested compute type; restores each module's mode after."""
        _check_choice("dtype", dtype, COMPUTE_DTYPES)
        modes = [(module, module.training) for module in self.modules()]
        self.eval()
        try:
            with torch.inference_mode(), torch.autocast(
                self.device.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16"
            ):
                yield
        finally:
            for module, training in modes:
                module.training = training


# --------------------------------------------------------------------------------------- helpers


def default_max_length(tokenizer, config) -> int:
    """The tokenizer's ``model_max_length``, capped at 512 and at the model's position embeddings."""
    limits = [MAX_LENGTH_CAP, getattr(tokenizer, "model_max_length", MAX_LENGTH_CAP) or MAX_LENGTH_CAP]
    positions = getattr(config, "max_position_embeddings", None)
    if positions:
        limits.append(positions)
    return int(min(limits))


def _check_choice(what: str, value: str, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise an InputError naming both."""
    if value not in choices:
        raise InputError(f"{what} must be one of {', '.join(choices)}; got {value!r}")
    return value


def _check_texts(texts: Sequence[str]) -> list[str]:
    """A list of strings, or an InputError naming the first item that is not a string."""
    if isinstance(texts, str):
        raise InputError(f"expected a list of questions, got a single string {_shorten(texts)!r}")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"question {i} is a {type(text).__name__}, not a string: {_shorten(repr(text))}")
    return texts


def _shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _progress(batches: list, enabled: bool):
    """Wrap ``batches`` in a tqdm bar when ``enabled``."""
    if not enabled:
        return batches
    from tqdm.auto import tqdm

    return tqdm(batches, desc="encoding", unit="batch")
