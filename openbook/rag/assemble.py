"""Putting a model together from names: generators, encoders, knowledge bases, trained runs.

This is where the layers meet, above :mod:`openbook.rag.model` and :mod:`openbook.rag.closed_book` (it
imports both; they never import it, not even inside a function: ``RAG.load`` is handed :func:`load_model` by
:mod:`openbook.rag`): a knowledge base is built by encoding passages (corpus) with a document encoder (models)
into an index (index), in :mod:`openbook.models.knowledge`; a generator name becomes the right adapter; a
training run directory (``run.json`` + checkpoint) becomes its trained model again (:func:`load_run`).
:func:`load_model` is the one function every command builds its model with.
"""

from __future__ import annotations

import json
from pathlib import Path

from openbook.atomic import atomic_output
from openbook.data import default_run_path
from openbook.errors import InputError
from openbook.index import KnowledgeBaseLike, load_knowledge_base
from openbook.models import load_causal_lm, load_config, load_encoder, load_seq2seq
from openbook.models.adapters import LoraSettings, merge_lora_tensors
from openbook.models.causal import CausalLMGenerator
from openbook.models.device import resolve_device
from openbook.models.encoders import Encoder
from openbook.models.generators import Generator, Seq2SeqGenerator
from openbook.models.hf_rag import is_hf_rag_checkpoint, load_hf_rag
from openbook.models.judge import LazyJudge
from openbook.models.knowledge import build_knowledge_base, demo_knowledge_base, encoder_name  # noqa: F401 (re-exported)
from openbook.models.loading import GENERATOR_ALIASES
from openbook.models.precision import TORCH_DTYPES, quantize_int8, resolve_dtype
from openbook.models.weights import load_tensors, load_weights, read_tensors, weights_path
from openbook.rag.abstain import run_threshold
from openbook.rag.closed_book import ClosedBook
from openbook.rag.model import RAG


def _is_rag_checkpoint(name_or_path: str) -> bool:
    """A transformers RAG checkpoint: a local directory, or a hub name whose config says ``rag``."""
    if name_or_path in GENERATOR_ALIASES or str(name_or_path).endswith(".gguf"):
        return False
    return is_hf_rag_checkpoint(name_or_path) or getattr(load_config(name_or_path), "model_type", "") == "rag"


def load_generator(name_or_path: str = "default") -> Generator:
    """A generator adapter by name: the offline default (SmolLM2), a causal LM, a seq2seq model, or the
    generator of a transformers RAG checkpoint."""
    if name_or_path in GENERATOR_ALIASES or str(name_or_path).endswith(".gguf"):
        return CausalLMGenerator(*load_causal_lm(name_or_path))
    config = load_config(name_or_path)
    if getattr(config, "model_type", "") == "rag":
        return load_hf_rag(name_or_path).generator
    if getattr(config, "is_encoder_decoder", False):
        return Seq2SeqGenerator(*load_seq2seq(name_or_path))
    return CausalLMGenerator(*load_causal_lm(name_or_path))


def load_rag(
    model: str | None = None,
    kb: str | Path | KnowledgeBaseLike | None = None,
    generator: str = "default",
    encoder: str | Encoder | None = None,
    **kwargs,
) -> RAG:
    """A :class:`~openbook.rag.model.RAG` from names. ``generator`` may be a transformers RAG checkpoint
    (``facebook/rag-sequence-nq``, or a ``save_pretrained`` directory): then its DPR question encoder
    is used unless ``encoder`` is given, and ``model`` defaults to the checkpoint's kind. ``encoder``
    (a name, a path or a loaded :class:`Encoder`) defaults to the one ``kb`` was built with (else the
    offline default)."""
    if _is_rag_checkpoint(generator):
        imported = load_hf_rag(generator)
        gen = imported.generator
        use_own = encoder is None or encoder == "default"
        query_encoder = imported.query_encoder if use_own else _encoder(encoder, kb)
        model = model or imported.model_type
    else:
        gen = load_generator(generator)
        query_encoder = _encoder(encoder, kb)
    if kb is None:
        knowledge = demo_knowledge_base(query_encoder)
    elif isinstance(kb, KnowledgeBaseLike):
        knowledge = kb
    else:
        knowledge = load_knowledge_base(kb, expected_encoder=query_encoder.info())
    return RAG(query_encoder, gen, knowledge, model=model or "rag-sequence", **kwargs)


def _encoder(encoder, kb) -> Encoder:
    return encoder if isinstance(encoder, Encoder) else load_encoder(encoder_name(encoder, kb))


def load_model(model: str | None = None, kb=None, generator: str = "default", encoder: str | Encoder | None = None,
               run: str | Path | None = None, retriever: str | None = None, k: int | None = None,
               untrained: bool = False, dtype: str = "float32", device="auto", **options):
    """The model a command works with, built in one place, in eval mode.

    With ``run`` (an ``openbook train --out`` directory): its trained model (:func:`load_run`); ``model``,
    ``kb``, ``retriever`` and ``k`` override the run's (the same weights decoded as RAG-Token, over
    another index, with BM25 ...), and the run brings its own generator and encoder. Without: ``model``
    ``"closed-book"`` is the generator alone (:class:`ClosedBook`), otherwise a :class:`RAG` of
    ``generator`` and ``encoder`` over ``kb`` (:func:`load_rag`; default: RAG-Sequence, dense retrieval,
    k=5). ``options`` go to :class:`RAG` (``learn_scale``, ``score_scale``).

    The offline default generator and encoder (``"default"``) come with openbook's shipped fine-tuned
    adapters (:func:`openbook.data.default_run_path`, a run loaded by :func:`load_run`) unless ``untrained``
    or ``options`` ask for something the trained run does not have; a closed-book model is never adapted.

    ``dtype`` (``float32``, ``bfloat16``, ``int8``, which is lossy (:mod:`~openbook.models.precision`), or
    ``auto``: bfloat16 where the CPU computes it natively, else float32) is the generator's: its weights are
    cast, or quantised (:func:`~openbook.models.precision.quantize_int8`), after loading and after a run's
    adapters are merged into them; the query encoder, and so retrieval, stays float32. The passage judge of a
    run's abstention runs in bfloat16 when the generator does, else in float32.

    ``device`` (``cpu``, ``cuda``, a ``torch.device``, or ``auto``: CUDA where available) is where the model
    runs: the generator, the query encoder and the learned score scale move there after loading; the
    knowledge base's vectors stay in FAISS on the host (:func:`openbook.models.device.resolve_device`)."""
    device = resolve_device(device)  # before loading: a missing GPU fails at once
    dtype = resolve_dtype(dtype, device.type)
    built = _load_model(model, kb, generator, encoder, run, retriever, k, untrained, **options)
    if dtype == "int8":
        quantize_int8(built.generator.model)
    elif dtype != "float32":
        built.generator.model.to(TORCH_DTYPES[dtype])
    if getattr(built, "passage_judge", None) is not None:  # bfloat16 with the generator, else float32 (never int8)
        built.passage_judge.dtype = "bfloat16" if dtype == "bfloat16" else "float32"
    return built.to(device)


def _load_model(model, kb, generator, encoder, run, retriever, k, untrained: bool, **options):
    if run is None:
        run = shipped_default(model, generator, encoder, untrained, options)
    if run is not None:
        if generator != "default" or (encoder is not None and encoder != "default"):
            raise InputError(f"a run ({run}) brings its own generator and encoder: give --generator/--encoder "
                             "without --run, or neither")
        return load_run(run, kb=kb, model=model, retriever=retriever, k=k)
    if model == "closed-book":
        return ClosedBook(load_generator(generator)).eval()
    settings = {"retriever": retriever or "dense", **({"k": k} if k is not None else {}), **options}
    return load_rag(model=model, kb=kb, generator=generator, encoder=encoder, **settings).eval()


def shipped_default(model=None, generator="default", encoder=None, untrained: bool = False,
                    options: dict | None = None) -> Path | None:
    """The shipped fine-tuned default run that these names mean (:func:`load_model`'s rule), or None: the
    offline default generator and encoder, not ``untrained``, not closed-book, no RAG ``options``."""
    if untrained or options or model == "closed-book" or generator != "default" or encoder not in (None, "default"):
        return None
    return default_run_path()


# ---------------------------------------------------------------------------------------------------
# trained runs

RUN_FILE = "run.json"  # what `openbook train --out DIR` needs to rebuild its model, next to DIR/checkpoint
RUN_KEYS = ("model", "generator", "encoder", "kb", "retriever", "k", "learn_scale")
REQUIRED_RUN_KEYS = ("model", "generator", "encoder")
CALIBRATED_WITH = ("model", "retriever", "k")  # a run's abstention threshold holds only with its own of these


def _as_location(value):
    """A local path as an absolute path (the run may be loaded from another directory); names unchanged."""
    if value is None or isinstance(value, KnowledgeBaseLike):
        return None if value is None else str(Path(value.path).resolve())
    path = Path(value)
    return str(path.resolve()) if path.exists() else str(value)


def write_run_spec(out_dir: str | Path, *, model: str, generator: str = "default", encoder: str = "default",
                   kb=None, retriever: str = "dense", k: int = 5, learn_scale: bool = False, **extra) -> Path:
    """Write ``out_dir/run.json``: what :func:`load_run` needs to rebuild the model of a training run.

    Local paths (generator, encoder, knowledge base) are stored absolute; ``kb=None`` is the demo
    knowledge base of the encoder. ``extra`` (e.g. the training data, the learning rates) is kept for the
    record."""
    spec = {"model": model, "generator": _as_location(generator), "encoder": _as_location(encoder),
            "kb": _as_location(kb), "retriever": retriever, "k": k, "learn_scale": learn_scale, **extra}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RUN_FILE
    with atomic_output(path) as tmp:  # fsynced, then renamed: never a half-written run.json
        tmp.write_text(json.dumps(spec, indent=1, ensure_ascii=False) + "\n")
    return path


def read_run_spec(run_dir: str | Path, **overrides) -> dict:
    """``run_dir/run.json`` updated with ``overrides`` (any of :data:`RUN_KEYS`; ``None`` values ignored).

    A run without run.json (trained before openbook wrote it) needs the model, generator and encoder
    given as overrides; the error says so."""
    unknown = sorted(set(overrides) - set(RUN_KEYS))
    if unknown:
        raise InputError(f"unknown run setting(s) {', '.join(unknown)}; known: {', '.join(RUN_KEYS)}")
    run_dir = Path(run_dir)
    path = run_dir / RUN_FILE
    spec = json.loads(path.read_text()) if path.is_file() else {}
    spec.update({key: value for key, value in overrides.items() if value is not None})
    missing = [key for key in REQUIRED_RUN_KEYS if key not in spec and not (key == "encoder" and
                                                                           spec.get("model") == "closed-book")]
    if missing:
        raise InputError(
            f"{run_dir} has no {RUN_FILE} (runs trained before openbook wrote it): give what it was trained "
            f"with, load_run({str(run_dir)!r}, {', '.join(f'{key}=...' for key in missing)}) "
            "(also kb=..., retriever=..., k=... if not the defaults)"
        )
    return spec


def apply_run_prompt(generator, spec: dict, run_dir) -> None:
    """Give ``generator`` (if it takes a prompt) the prompt a run's ``spec`` records; InputError naming the run."""
    prompt = spec.get("prompt")
    if prompt and hasattr(generator, "set_prompt"):
        if not isinstance(prompt, dict) or set(prompt) - {"template", "system"}:
            raise InputError(f"{run_dir}/{RUN_FILE}: 'prompt' must be {{\"template\": ..., \"system\": ...}}")
        try:
            generator.set_prompt(prompt.get("template"), prompt.get("system"))
        except ValueError as error:
            raise InputError(f"{run_dir}/{RUN_FILE}: {error}") from None


def load_run(run_dir: str | Path, kb=None, **overrides):
    """The model of a training run (``openbook train --out DIR``) with its trained weights.

    Rebuilds the :class:`~openbook.rag.model.RAG` (or :class:`~openbook.rag.closed_book.ClosedBook`) that
    ``DIR/run.json`` describes and loads ``DIR/checkpoint/model.safetensors`` into it. ``kb``
    replaces the run's knowledge base (a directory or a loaded KnowledgeBase, e.g. another index built
    with the same encoder); ``overrides`` replace other run settings (``model``, ``k``, ``retriever`` ...:
    the same weights decoded as RAG-Token, with BM25 ...). Returned in eval mode.
    """

    spec = read_run_spec(run_dir, **overrides)
    weights = weights_path(Path(run_dir) / "checkpoint", hint="is it an `openbook train --out` run?")
    if spec["model"] == "closed-book":
        model = ClosedBook(load_generator(spec["generator"]))
    else:
        knowledge = kb if kb is not None else spec.get("kb")
        model = load_rag(model=spec["model"], kb=knowledge, generator=spec["generator"], encoder=spec["encoder"],
                         k=int(spec.get("k", 5)), learn_scale=bool(spec.get("learn_scale", False)),
                         retriever=spec.get("retriever", "dense"))
    if spec.get("max_context_length"):  # what the run was trained with
        model.generator.max_context_length = int(spec["max_context_length"])
    apply_run_prompt(model.generator, spec, run_dir)  # the prompt the run was trained with
    what = f"the model {run_dir}/{RUN_FILE} describes"
    if spec.get("lora"):  # the checkpoint holds the adapters (and what else was trained), not the base model:
        # folded into the base weights (answering then costs what the base model costs), the rest loaded
        rest = merge_lora_tensors(model, read_tensors(weights), LoraSettings.from_dict(spec["lora"]),
                                  prefix="generator.model.")
        load_tensors(model, rest, weights, what, required=set())
    else:
        load_weights(model, weights, what)
    if "abstain" in spec and isinstance(model, RAG):  # a threshold holds only for the model it was calibrated on
        as_calibrated = read_run_spec(run_dir)
        if all(spec.get(key) == as_calibrated.get(key) for key in CALIBRATED_WITH):
            model.use_judge(load_judge(run_dir, spec))
            model.abstain_threshold = run_threshold(spec, f"{run_dir}/{RUN_FILE}", model.passage_judge is not None)
    return model.eval()


def load_judge(run_dir: str | Path, spec: dict) -> LazyJudge | None:
    """The passage judge a run's abstention reads (``"abstain": {"judge": FILE}``, a file in ``run_dir``; loaded
    when it first judges), or None if it names none."""
    block = spec.get("abstain")
    name = block.get("judge") if isinstance(block, dict) else None
    if name is None:
        return None
    if not isinstance(name, str) or Path(name).name != name or name.startswith("."):
        raise InputError(f"{run_dir}/{RUN_FILE}: the abstain judge must be a file name in the run's folder, "
                         f"got {name!r}")
    path = Path(run_dir) / name
    if not path.is_file():
        raise InputError(f"{run_dir}/{RUN_FILE}: the abstain judge {name} is not in {run_dir}")
    return LazyJudge(path)
