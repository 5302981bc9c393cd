"""End-to-end RAG fine-tuning (Lewis et al. 2020, section 2.4).

Minimise the negative marginal log-likelihood sum_j -log p(y_j|x_j) with Adam, updating the query
encoder q(x) and the generator p_theta while the document encoder and the index stay frozen. The
``frozen`` retriever ablation (Table 6) also freezes q(x): it then runs in eval mode, and the training
questions' passages are retrieved once and read from memory while the index is released. A model without
a retriever (the closed-book baseline, :class:`~openbook.rag.closed_book.ClosedBook`) trains its generator
only.

Resumable: a checkpoint (written atomically, in safetensors plus JSON: nothing in it is unpickled) holds
the trainable weights, the optimiser state, the RNG states and the position in the data order, so
``resume=True`` after an interruption continues to the same weights an uninterrupted run reaches.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import openbook.train.distributed as distributed
from openbook.atomic import atomic_dir, exclusive_lock, remove_leftovers_beside
from openbook.errors import InputError
from openbook.index.retriever import PinnedRetriever
from openbook.models.adapters import LORA_MARK, has_lora, lora_tensor_names
from openbook.models.device import module_device
from openbook.models.weights import WEIGHTS_FILE, load_weights, read_tensors, save_weights, weights_path, write_tensors
from openbook.progress import progress_bar

CHECKPOINT = "checkpoint"
LOCK_FILE = ".train.lock"  # held by the one process training into a run folder
OPTIMIZER_FILE = "optimizer.safetensors"  # + optimizer.json
RNG_FILE = "rng.safetensors"  # + rng.json


@dataclass
class TrainConfig:
    """Training options. Learning rates are per part: the paper fine-tunes q(x) and the generator."""

    k: int = 5
    epochs: int = 1
    max_steps: int | None = None  # optimiser steps; overrides epochs when set
    batch_size: int = 4
    grad_accumulation: int = 1
    lr_generator: float = 3e-5
    lr_query_encoder: float = 1e-5
    lr_score_scale: float = 1e-2  # only if the model's score scale is learnable
    lr_schedule: str = "constant"  # or "linear": warm up, then decay to zero at the last step (see lr_factor)
    warmup_steps: int = 0
    label_smoothing: float = 0.0
    max_target_length: int = 32
    freeze_retriever: bool = False  # the "Frozen" ablation: q(x) is not updated
    seed: int = 0
    checkpoint_every: int = 50  # optimiser steps
    eval_every: int = 0  # optimiser steps; 0 = only at the end
    mixed_precision: bool = False  # bfloat16 autocast on the model's device (CPUs with native bfloat16, GPUs)
    extra: dict = field(default_factory=dict)


@dataclass
class TrainState:
    step: int = 0  # optimiser steps taken
    epoch: int = 0
    position: int = 0  # examples consumed in the current epoch's order
    history: list = field(default_factory=list)  # (step, loss) and dev results


def parameter_groups(rag, cfg: TrainConfig) -> list[dict]:
    """Adam groups: the generator (its LoRA adapters, if it has them), the query encoder (unless frozen or
    absent), the learnable score scale."""
    rates = _group_rates(cfg)
    groups = [{"params": _generator_parameters(rag), "lr": rates["generator"], "name": "generator"}]
    if not cfg.freeze_retriever and _query_encoder(rag) is not None:
        groups.append({"params": list(rag.query_encoder.parameters()), "lr": rates["query_encoder"],
                       "name": "query_encoder"})
    if getattr(rag, "log_scale", None) is not None and rag.log_scale.requires_grad:
        groups.append({"params": [rag.log_scale], "lr": rates["score_scale"], "name": "score_scale"})
    return groups


LR_SCHEDULES = ("constant", "linear")


def _group_rates(cfg: TrainConfig) -> dict[str, float]:
    """The configured learning rate of each Adam group, by the group's name."""
    return {"generator": cfg.lr_generator, "query_encoder": cfg.lr_query_encoder, "score_scale": cfg.lr_score_scale}


def lr_factor(step: int, total: int, schedule: str = "constant", warmup_steps: int = 0) -> float:
    """The learning-rate multiplier of optimiser step ``step`` (0-based) of ``total``: a linear warm-up over
    ``warmup_steps`` steps, then constant or (``linear``, transformers' ``get_linear_schedule_with_warmup``)
    falling linearly so that the step after the last would have rate zero. A pure function of the step, so a
    resumed run takes exactly the rates the uninterrupted one takes."""
    if schedule not in LR_SCHEDULES:
        raise InputError(f"unknown learning-rate schedule {schedule!r} (choose from {', '.join(LR_SCHEDULES)})")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    return max(0.0, (total - step) / max(1, total - warmup_steps))


def _set_learning_rates(optimizer, cfg: TrainConfig, step: int, total: int) -> None:
    """Each group's rate for this step: its configured rate times :func:`lr_factor` (left alone when the
    factor is always 1, so a constant-rate run resumes with the rates its checkpoint holds, as before)."""
    if cfg.lr_schedule == "constant" and not cfg.warmup_steps:
        return
    base = _group_rates(cfg)
    factor = lr_factor(step, total, cfg.lr_schedule, cfg.warmup_steps)
    for group in optimizer.param_groups:
        group["lr"] = base[group["name"]] * factor


def _query_encoder(rag):
    """q(x), or None for a model without retrieval (the closed-book generator)."""
    return getattr(rag, "query_encoder", None)


def _generator_parameters(rag) -> list:
    """The generator weights training updates: all of them, or only the LoRA adapters if it has some."""
    if has_lora(rag.generator):
        return [p for name, p in rag.generator.named_parameters() if LORA_MARK in name]
    return list(rag.generator.parameters())


def trained_tensor_names(rag) -> set[str] | None:
    """For a model with LoRA adapters, the state-dict names a checkpoint keeps: the adapters, the query
    encoder if it is trained and the score scale (the packaged base model is not copied into every
    checkpoint); None (everything) otherwise."""
    if not has_lora(rag.generator):
        return None
    trained = {id(p) for p in rag.parameters() if p.requires_grad}
    names = {name for name, p in rag.named_parameters() if id(p) in trained or LORA_MARK in name}
    return names | ({"log_scale"} if getattr(rag, "log_scale", None) is not None else set())


def _train_mode(rag, cfg: TrainConfig) -> None:
    """Training mode for what trains. A frozen q(x) stays in eval mode (no dropout): the paper's fixed retriever
    retrieves the same passages for a question at every step, and its p(z|x) is the one asking sees."""
    rag.train()
    if cfg.freeze_retriever and _query_encoder(rag) is not None:
        _query_encoder(rag).eval()


def _set_trainable(rag, cfg: TrainConfig) -> None:
    lora = has_lora(rag.generator)
    for name, p in rag.generator.named_parameters():
        p.requires_grad_(LORA_MARK in name or not lora)
    for p in _query_encoder(rag).parameters() if _query_encoder(rag) is not None else ():
        p.requires_grad_(not cfg.freeze_retriever)


def _epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def save_checkpoint(out_dir: Path, rag, optimizer, state: TrainState, cfg: TrainConfig) -> None:
    """Write ``out_dir/checkpoint`` atomically: a crash leaves the previous checkpoint intact.

    Everything is safetensors plus JSON, nothing is pickled: ``model.safetensors`` (the model's weights, or
    for a LoRA model only what training changes, :func:`trained_tensor_names`; the document vectors and
    index live in the knowledge base), ``optimizer.safetensors`` +
    ``optimizer.json`` (Adam's moments, and its parameter groups and step counts), ``rng.safetensors`` +
    ``rng.json`` (torch's generator state, a uint8 tensor, and Python's ``random`` state) and
    ``state.json`` (the position in the data order and the training options).
    """
    target = out_dir / CHECKPOINT
    with atomic_dir(target) as tmp:
        save_weights(rag, tmp / WEIGHTS_FILE, only=trained_tensor_names(rag))
        write_tensors(tmp / OPTIMIZER_FILE, *_split_optimizer_state(optimizer.state_dict()))
        version, internal, gauss = random.getstate()
        write_tensors(tmp / RNG_FILE, {"torch": torch.get_rng_state()},
                      {"python": {"version": version, "state": list(internal), "gauss_next": gauss}})
        (tmp / "state.json").write_text(json.dumps({"state": asdict(state), "config": asdict(cfg)}, indent=1))


def load_checkpoint(out_dir: Path, rag, optimizer) -> TrainState:
    """Restore weights, optimiser, RNG states and position from ``out_dir/checkpoint`` (see :func:`save_checkpoint`)."""
    path = out_dir / CHECKPOINT
    if not (path / "state.json").is_file():
        raise InputError(f"no checkpoint to resume from in {out_dir} (expected {path}/state.json)")
    lora = has_lora(rag.generator)
    load_weights(rag, weights_path(path), "the model being trained", required=lora_tensor_names(rag) if lora else None)
    tensors, data = read_tensors(path / OPTIMIZER_FILE, with_data=True)
    try:
        optimizer.load_state_dict(_join_optimizer_state(tensors, data))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path / OPTIMIZER_FILE} does not fit the optimiser being resumed: {exc}") from None
    rng, data = read_tensors(path / RNG_FILE, with_data=True)
    try:
        random.setstate(_python_rng_state(data["python"], (path / RNG_FILE).with_suffix(".json")))
        torch.set_rng_state(rng["torch"])
        return _train_state(json.loads((path / "state.json").read_text())["state"], path / "state.json")
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise InputError(f"{path} holds a damaged training state: {type(exc).__name__}: {exc}") from None


def _whole(value, low: int, high: int | None = None) -> bool:
    """Whether ``value`` is an int (not a bool) from ``low`` to ``high`` (inclusive; no bound if None)."""
    return (isinstance(value, int) and not isinstance(value, bool) and value >= low
            and (high is None or value <= high))


def _python_rng_state(saved, where: Path) -> tuple:
    """``random.setstate``'s argument from rng.json, checked: Mersenne Twister's 624 32-bit words and its
    position (InputError naming the file, where ``random`` would raise OverflowError or accept garbage)."""
    words = saved.get("state") if isinstance(saved, dict) else None
    gauss = saved.get("gauss_next") if isinstance(saved, dict) else None
    if not (isinstance(words, list) and len(words) == 625 and all(_whole(w, 0, 2**32 - 1) for w in words[:624])
            and _whole(words[624], 0, 624) and _whole(saved.get("version"), 1)
            and (gauss is None or (isinstance(gauss, float) and math.isfinite(gauss)))):
        raise InputError(f"{where} holds a damaged random state (expected Python's: a version, 624 32-bit words "
                         "and a position, and gauss_next)")
    return saved["version"], tuple(words), gauss


def _train_state(saved, where: Path) -> TrainState:
    """The TrainState of state.json, checked: whole step, epoch and position of at least 0, a list of history."""
    if not isinstance(saved, dict) or set(saved) - set(TrainState.__dataclass_fields__):
        raise InputError(f"{where} holds a damaged training state (not a step, epoch, position and history)")
    for name in ("step", "epoch", "position"):
        if name in saved and not _whole(saved[name], 0):
            raise InputError(f"{where} holds a damaged training state: {name} must be a whole number of at "
                             f"least 0, got {saved[name]!r}")
    if not isinstance(saved.get("history", []), list):
        raise InputError(f"{where} holds a damaged training state: history must be a list")
    return TrainState(**saved)


def _split_optimizer_state(state_dict: dict) -> tuple[dict, dict]:
    """An optimiser ``state_dict`` as (tensors named ``state.<param>.<key>``, the JSON-able rest)."""
    tensors, values = {}, {}
    for param, per_param in state_dict["state"].items():
        for key, value in per_param.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{param}.{key}"] = value
            else:
                values.setdefault(str(param), {})[key] = value
    return tensors, {"param_groups": state_dict["param_groups"], "values": values}


def _join_optimizer_state(tensors: dict, data: dict) -> dict:
    """The inverse of :func:`_split_optimizer_state` (parameter ids are ints again, ``betas`` a tuple)."""
    state: dict = {}
    for name, tensor in tensors.items():
        _, param, key = name.split(".", 2)
        state.setdefault(int(param), {})[key] = tensor
    for param, per_param in data["values"].items():
        state.setdefault(int(param), {}).update(per_param)
    groups = [{**group, **({"betas": tuple(group["betas"])} if "betas" in group else {})}
              for group in data["param_groups"]]
    return {"state": state, "param_groups": groups}


def train(
    rag,
    examples: Sequence[tuple[str, str]],
    cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    evaluate: Callable[[object], dict] | None = None,
    progress: bool = True,
    stop_after: int | None = None,
) -> TrainState:
    """Fine-tune ``rag`` on (input, target) pairs; checkpoints go to ``out_dir``.

    ``evaluate(rag) -> dict`` runs on the dev set every ``cfg.eval_every`` steps and at the end.
    ``stop_after`` stops after that many optimiser steps *of this call* (to simulate an interruption).
    Started by torchrun, it trains data-parallel (:mod:`openbook.train.distributed`): ``cfg.batch_size`` is
    the global batch, split over the processes, and the weights follow the one-process run's.
    """
    if not examples:
        raise InputError("no training examples")
    distributed.check_batch_size(cfg.batch_size, distributed.world_size())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with distributed.process_group(module_device(rag)):
        if not distributed.is_main():  # rank 0 holds the lock, writes checkpoints, evaluates and reports
            with _pinned_retrieval(rag, examples, cfg):
                return _train(rag, examples, cfg, out_dir, resume, None, False, stop_after)
        # One training process per run folder; holding its lock, the half-written checkpoint copies of a killed
        # run (.checkpoint.building-*, hundreds of MB) cannot belong to a live writer: remove them.
        with exclusive_lock(out_dir / LOCK_FILE, f"training run {out_dir}", InputError):
            remove_leftovers_beside(out_dir / CHECKPOINT)
            with _pinned_retrieval(rag, examples, cfg):
                return _train(rag, examples, cfg, out_dir, resume, evaluate, progress, stop_after)


@contextlib.contextmanager
def _pinned_retrieval(rag, examples: Sequence[tuple[str, str]], cfg: TrainConfig) -> Iterator[None]:
    """With a frozen retriever, the training questions' top k retrieved once (q(x) in eval mode) and read from
    memory at every step (:class:`~openbook.index.retriever.PinnedRetriever`), the knowledge base's index
    released meanwhile: on a large book its mapped vectors would otherwise stay resident beside the generator's
    activations. The model's own retriever is back afterwards."""
    retriever = getattr(rag, "retriever", None)
    if not cfg.freeze_retriever or retriever is None:
        yield
        return
    _train_mode(rag, cfg)  # q(x) in eval mode: the passages it pins are the ones it would retrieve
    pinned = PinnedRetriever(retriever, [x for x, _ in examples], cfg.k)
    rag.retriever = pinned
    pinned.release_index()
    try:
        yield
    finally:
        rag.retriever = retriever


def _train(rag, examples, cfg: TrainConfig, out_dir: Path, resume: bool, evaluate, progress: bool,
           stop_after: int | None) -> TrainState:
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    _set_trainable(rag, cfg)
    optimizer = torch.optim.Adam(parameter_groups(rag, cfg))
    state = load_checkpoint(out_dir, rag, optimizer) if resume else TrainState()
    model = distributed.wrap(rag)  # rag.loss, DDP-wrapped under torchrun
    per_step = cfg.batch_size * cfg.grad_accumulation
    steps_per_epoch = max(1, math.ceil(len(examples) / per_step))
    total = cfg.max_steps or steps_per_epoch * cfg.epochs
    bar = progress_bar(total=total, initial=state.step, unit="step", desc="training", enabled=progress)
    taken, started = 0, time.perf_counter()
    _train_mode(rag, cfg)
    while state.step < total:
        order = _epoch_order(len(examples), cfg.seed, state.epoch)
        while state.position < len(order) and state.step < total:
            _set_learning_rates(optimizer, cfg, state.step, total)
            loss_value = _optimiser_step(model, optimizer, examples, order, state, cfg)
            state.step += 1
            taken += 1
            state.history.append({"step": state.step, "loss": loss_value})
            bar.set_postfix(loss=f"{loss_value:.3f}", ex_per_s=f"{taken * per_step / (time.perf_counter() - started):.1f}",
                            refresh=False)
            bar.update(1)
            if cfg.eval_every and state.step % cfg.eval_every == 0:
                _evaluate(rag, evaluate, state, cfg)
            if state.step % cfg.checkpoint_every == 0 or state.step == total:
                _save(out_dir, rag, optimizer, state, cfg)
            if stop_after is not None and taken >= stop_after:
                bar.close()
                return state
        if state.position >= len(order):
            state.epoch, state.position = state.epoch + 1, 0
    bar.close()
    _evaluate(rag, evaluate, state, cfg)
    _save(out_dir, rag, optimizer, state, cfg)
    return state


def _save(out_dir: Path, rag, optimizer, state: TrainState, cfg: TrainConfig) -> None:
    """Rank 0 writes the checkpoint; the other processes wait until it is complete."""
    if distributed.is_main():
        save_checkpoint(out_dir, rag, optimizer, state, cfg)
    distributed.barrier()


def _evaluate(rag, evaluate, state: TrainState, cfg: TrainConfig) -> None:
    """Score the dev set into the history (rank 0, which alone has ``evaluate``; the others wait)."""
    if evaluate is not None:
        rag.eval()
        try:
            state.history.append({"step": state.step, "dev": evaluate(rag)})
        finally:
            _train_mode(rag, cfg)
    distributed.barrier()


def _optimiser_step(model, optimizer, examples, order, state: TrainState, cfg: TrainConfig) -> float:
    """One Adam step over ``grad_accumulation`` micro-batches; returns the mean loss. ``model(questions,
    answers)`` is ``rag.loss``; under DDP each process takes its shard of every global micro-batch."""
    optimizer.zero_grad(set_to_none=True)
    micro = min(cfg.grad_accumulation, math.ceil((len(order) - state.position) / cfg.batch_size))
    loss_sum = 0.0
    device_type = module_device(model).type  # autocast on the device the model trains on (cpu or cuda)
    for m in range(micro):
        batch = [examples[i] for i in order[state.position: state.position + cfg.batch_size]]
        state.position += len(batch)
        mine = distributed.shard(batch)
        with distributed.accumulating(model, last=m == micro - 1):
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=cfg.mixed_precision):
                loss = model([x for x, _ in mine.examples], [y for _, y in mine.examples], k=cfg.k,
                             epsilon=cfg.label_smoothing, max_target_length=cfg.max_target_length)
            (loss * (mine.weight / cfg.grad_accumulation)).backward()
        loss_sum += float(loss.detach()) * mine.weight
    optimizer.step()
    return distributed.global_mean(loss_sum / distributed.world_size()) / max(1, micro)
