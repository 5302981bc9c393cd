"""Export a trained run as a transformers RAG model (``RagSequenceForGeneration`` / ``RagTokenForGeneration``).

``openbook export RUN --format transformers --out DIR`` writes what ``save_pretrained`` writes for a RAG
model -- ``config.json`` (a ``RagConfig`` built from the question-encoder and generator configs),
``model.safetensors`` and the two tokenizers in ``question_encoder_tokenizer/`` and
``generator_tokenizer/`` (the layout of ``facebook/rag-sequence-nq``) -- so that
``RagSequenceForGeneration.from_pretrained(DIR)`` (or ``RagTokenForGeneration``) gives the loss openbook
gives for the same question, answer and documents. The knowledge base is not part of it: transformers
retrieves through a ``RagRetriever`` over its own index, which can be built from the knowledge base's
passages and vectors.

What transformers' RAG can express, and so what is exported:

* the generator must be an encoder-decoder (BART, T5, ...): transformers' RAG has no causal-LM
  generator, so a causal-LM or closed-book run is refused;
* the query encoder becomes a ``DPRQuestionEncoder``, which scores with its raw CLS vector (plus DPR's
  optional projection): a DPR question encoder is copied as it is, a BERT encoder with CLS pooling is
  renamed into one; mean pooling or L2-normalised vectors (the default MiniLM encoder) cannot be
  expressed and are refused, as are BM25 runs (no dense retriever);
* p(z|x) = softmax(scale * d(z)^T q(x)) in openbook, softmax(d(z)^T q(x)) in transformers: a score scale
  other than 1 (normalised encoders, ``--learn-scale``) is folded into the question encoder's last
  linear map (DPR's projection, else the last layer's output LayerNorm), which scales q(x) exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

import torch

from openbook.atomic import atomic_dir
from openbook.errors import InputError

FORMATS = ("transformers",)
EXPORT_NOTE = "openbook-export.json"  # what was exported from where, next to the transformers files
# BertConfig fields that describe the network, carried over to the DPRConfig of a renamed BERT encoder
_BERT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
                "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id")


def export_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike, format: str = "transformers",
               force: bool = False) -> Path:
    """Export the trained model of ``run_dir`` (``openbook train --out``) to ``out_dir``; returns ``out_dir``.

    An existing non-empty ``out_dir`` is replaced only with ``force``, and only if it is itself an export
    (a transformers RAG directory): other folders are never deleted.
    """
    from openbook.rag.assemble import load_run

    if format not in FORMATS:
        raise InputError(f"unknown export format {format!r}; known: {', '.join(FORMATS)}")
    _check_destination(Path(out_dir), force)  # before the slow part
    return export_transformers(load_run(run_dir), out_dir, force=force,
                               label_smoothing=_trained_label_smoothing(run_dir),
                               note={"run": str(Path(run_dir).resolve())})


def export_transformers(rag, out_dir: str | os.PathLike, *, force: bool = False, label_smoothing: float = 0.0,
                        note: dict | None = None) -> Path:
    """Write ``rag`` (an openbook :class:`~openbook.rag.model.RAG`) as a transformers RAG directory, atomically
    (``out_dir`` as in :func:`export_run`)."""
    from transformers import RagConfig, RagSequenceForGeneration, RagTokenForGeneration, RagTokenizer

    from openbook.models.loading import quiet_loading
    from openbook.rag.model import RAG

    if not isinstance(rag, RAG):
        raise InputError("a closed-book run has no retriever: transformers' RAG needs a question encoder and "
                         "a knowledge base (export a rag-sequence or rag-token run)")
    generator = rag.generator
    if not generator.is_seq2seq:
        raise InputError("a causal-LM run cannot be expressed as a transformers RAG model, whose generator is "
                         "an encoder-decoder (BART, T5): train with such a --generator to export")
    if rag.retriever.name != "dense":
        raise InputError(f"a {rag.retriever.name} run has no dense retriever to export as a question encoder")
    question_encoder = dpr_question_encoder(rag.query_encoder, float(rag.score_scale.detach()))
    config = RagConfig.from_question_encoder_generator_configs(
        question_encoder.config, generator.model.config, n_docs=rag.k, max_combined_length=generator.max_context_length,
        title_sep=generator.title_sep, doc_sep=generator.doc_sep, retrieval_vector_size=rag.kb.dim,
        label_smoothing=float(label_smoothing),
    )
    # transformers' RAG-Sequence loss reads generator.bos_token_id, which T5Config (no BOS) lacks in 5.x
    config.generator.bos_token_id = getattr(generator.model.config, "bos_token_id", None)
    cls = RagTokenForGeneration if rag.model_type == "rag-token" else RagSequenceForGeneration
    exported = cls(config=config)  # fresh modules of the right classes, then the trained weights, strictly
    exported.rag.question_encoder.load_state_dict(question_encoder.state_dict())
    exported.rag.generator.load_state_dict(generator.model.state_dict())
    exported.generation_config = generator.model.generation_config  # forced BOS/EOS, start token
    out = Path(out_dir)
    _check_destination(out, force)
    with atomic_dir(out, "exporting") as tmp:
        with quiet_loading():
            exported.eval().save_pretrained(tmp)
            RagTokenizer(rag.query_encoder.tokenizer, generator.tokenizer).save_pretrained(tmp)
        (tmp / EXPORT_NOTE).write_text(json.dumps({
            **(note or {}), "class": cls.__name__, "model": rag.model_type, "knowledge_base": str(rag.kb.path),
            "score_scale_folded_into_question_encoder": float(rag.score_scale.detach()),
            "files": _files_in(tmp),  # what --force may replace: nothing else found there later
        }, indent=1) + "\n", encoding="utf-8")
    return out


def dpr_question_encoder(encoder, scale: float = 1.0):
    """A ``DPRQuestionEncoder`` whose output is ``scale`` times openbook's q(x) for ``encoder``, or an InputError."""
    from transformers import DPRConfig, DPRQuestionEncoder

    model, name = encoder.model, encoder.name
    model_type = getattr(model.config, "model_type", "")
    if encoder.normalize:
        raise InputError(f"query encoder {name!r} L2-normalises its vectors, which transformers' RAG (DPR's raw "
                         "CLS vector) cannot express; export needs a DPR or BERT (CLS pooling) query encoder")
    if model_type == "dpr" and encoder.pooling in ("pooler", "cls"):
        config = DPRConfig.from_dict(model.config.to_dict())
        prefix = next(iter(model.state_dict())).split(".", 1)[0]  # question_encoder or ctx_encoder
        state = {"question_encoder." + key.split(".", 1)[1]: value for key, value in model.state_dict().items()
                 if key.startswith(prefix + ".")}
    elif model_type == "bert" and encoder.pooling == "cls":
        bert = model.config.to_dict()
        config = DPRConfig(**{key: bert[key] for key in _BERT_FIELDS if key in bert}, projection_dim=0)
        state = {f"question_encoder.bert_model.{key}": value for key, value in model.state_dict().items()
                 if not key.startswith("pooler.")}
    else:
        raise InputError(f"query encoder {name!r} ({model_type or 'unknown'} with {encoder.pooling} pooling) cannot be "
                         "expressed as transformers' DPR question encoder; export needs DPR, or BERT with CLS pooling")
    state = {key: value.detach().clone() for key, value in state.items()}
    if scale != 1.0:
        _fold_scale(state, config, scale)
    question_encoder = DPRQuestionEncoder(config)
    question_encoder.load_state_dict(state)
    return question_encoder.eval()


def _fold_scale(state: dict, config, scale: float) -> None:
    """Multiply the last linear map of the encoder by ``scale``, so that its output vector is scaled exactly."""
    if getattr(config, "projection_dim", 0):
        names = ("question_encoder.encode_proj.weight", "question_encoder.encode_proj.bias")
    else:
        last = config.num_hidden_layers - 1
        names = tuple(f"question_encoder.bert_model.encoder.layer.{last}.output.LayerNorm.{part}"
                      for part in ("weight", "bias"))
    for name in names:
        state[name] = state[name] * torch.tensor(scale, dtype=state[name].dtype)


def _check_destination(out: Path, force: bool) -> None:
    if out.is_file() or (out.exists() and not out.is_dir()):
        raise InputError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise InputError(f"{out} exists and is not empty; give --force to replace an earlier export")
        if not (out / EXPORT_NOTE).is_file():
            raise InputError(f"{out} is not an openbook export (no {EXPORT_NOTE}); not replacing it, even with --force")
        written = _recorded_files(out)
        if written is None:
            raise InputError(f"{out} does not list the files its export wrote (an export by an older openbook, or a "
                             f"damaged {EXPORT_NOTE}), so --force cannot tell them from others: remove it yourself")
        foreign = _foreign_files(out, {*written, EXPORT_NOTE})
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise InputError(f"refusing to replace export {out}: it also holds files the export did not write "
                             f"({shown}); move them out first or choose another --out")


def _files_in(folder: Path) -> list[str]:
    """The files under ``folder``, as sorted relative POSIX paths (what an export's note lists)."""
    return sorted(entry.relative_to(folder).as_posix() for entry in folder.rglob("*")
                  if entry.is_symlink() or not entry.is_dir())


def _recorded_files(out: Path) -> list[str] | None:
    """The files the export at ``out`` wrote, as its note lists them, or None if it lists none."""
    try:
        written = json.loads((out / EXPORT_NOTE).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    return written if isinstance(written, list) and all(isinstance(name, str) for name in written) else None


def _foreign_files(out: Path, own: set[str]) -> list[str]:
    """What ``out`` holds beyond the files ``own`` and their folders, each foreign folder named once."""
    own_dirs = {parent.as_posix() for name in own for parent in PurePosixPath(name).parents}
    foreign: list[str] = []
    for entry in sorted(out.rglob("*")):
        name = entry.relative_to(out).as_posix()
        if any(name.startswith(f + "/") for f in foreign):
            continue  # inside a foreign folder, named already
        if name not in (own_dirs if entry.is_dir() and not entry.is_symlink() else own):
            foreign.append(name)
    return foreign


def _trained_label_smoothing(run_dir) -> float:
    """The label smoothing the run trained with (kept in its checkpoint's state.json), else 0."""
    try:
        state = json.loads((Path(run_dir) / "checkpoint" / "state.json").read_text(encoding="utf-8"))
        return float(state["config"].get("label_smoothing", 0.0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0.0
