"""Distributed data-parallel training on ``torch.distributed`` (DDP), as launched by torchrun.

``torchrun --nproc-per-node N -m openbook train ...`` (or ``openbook train --nproc N``, which runs torchrun's
elastic launcher, :mod:`torch.distributed.run`, in-process) starts N copies of the trainer. Each one:

* joins the process group torchrun describes in its environment (``RANK``, ``WORLD_SIZE``, ...): gloo on the
  CPU, NCCL on CUDA, chosen from the device the model is on (:func:`process_group`);
* reads the same data in the same order (one seed, one global order), cuts each global micro-batch into
  contiguous shards and takes its own (:func:`shard`), retrieves and computes the loss for it;
* lets DDP average the gradients of the trainable parameters (:func:`wrap`). Because ``RAG.loss`` is a
  mean over its batch, each rank scales its local mean by ``world * local_n / global_n`` (:class:`Shard`),
  so that DDP's average is the gradient of the mean over the global batch: the update equals the
  one-process update on the same global batch, also when the last batch of an epoch splits unevenly.

Rank 0 alone writes checkpoints and reports; the others wait at :func:`barrier`. The checkpoint knows no
world size (unwrapped weights, global step and data position), so a run resumes in any number of processes.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from openbook.errors import InputError, OpenbookError


def launched() -> bool:
    """True in a process torchrun started (its environment names a rank and a world size)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def world_size() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", 1)) if launched() else 1


def rank() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", 0)) if launched() else 0


def is_main() -> bool:
    """The process that writes checkpoints, logs and reports (rank 0; the only one without torchrun)."""
    return rank() == 0


def check_batch_size(batch_size: int, processes: int) -> None:
    """The global batch must split evenly over the processes (one-line error otherwise)."""
    if batch_size % processes:
        raise InputError(f"--batch-size {batch_size} (the global batch) does not divide among {processes} "
                         f"processes: use a multiple of {processes}")


@contextlib.contextmanager
def process_group(device: torch.device | str = "cpu"):
    """Join torchrun's process group for the duration (gloo on CPU, NCCL on CUDA) and leave it after;
    nothing outside torchrun, or if a group exists already (its owner tears it down). On CUDA the process's
    current GPU becomes its own, ``LOCAL_RANK`` (where :func:`openbook.models.device.resolve_device` put the
    model under torchrun), so that NCCL's collectives and DDP run there."""
    if not launched() or dist.is_initialized():
        yield
        return
    cuda = torch.device(device).type == "cuda"
    if cuda:
        index = torch.device(device).index
        torch.cuda.set_device(index if index is not None else int(os.environ.get("LOCAL_RANK", 0)))
    # Rank 0 alone evaluates and writes checkpoints while the others wait: give a long dev evaluation time.
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(hours=2))
    try:
        yield
    finally:
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


class _Loss(torch.nn.Module):
    """``rag.loss`` as a module's forward, the call DDP wraps (it prepares its gradient reduction there)."""

    def __init__(self, rag):
        super().__init__()
        self.rag = rag

    def forward(self, questions, answers, **options):
        return self.rag.loss(questions, answers, **options)


def wrap(rag) -> torch.nn.Module:
    """The module whose forward is ``rag.loss``: DDP-wrapped over the trainable parameters in a process
    group, plain otherwise. Parameters without a gradient in a step (a pooler q(x) does not use, frozen
    parts) are allowed; those no rank used keep no gradient, as in one process."""
    module = _Loss(rag)
    if not (dist.is_available() and dist.is_initialized()):
        return module
    device = next(rag.parameters()).device
    ids = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(module, device_ids=ids, find_unused_parameters=True)


def accumulating(module, last: bool):
    """DDP's ``no_sync`` for every micro-batch of a step but the last (one gradient all-reduce per step)."""
    return module.no_sync() if hasattr(module, "no_sync") and not last else contextlib.nullcontext()


@dataclass
class Shard:
    """This rank's share of a global micro-batch: its examples and the factor on their mean loss."""

    examples: list
    weight: float  # world * local_n / global_n: DDP's average of the weighted means is the global mean


def shard(batch: list) -> Shard:
    """Contiguous shards of sizes differing by at most one. A rank left without examples (a last batch
    smaller than the world) computes the first example's loss with weight 0, so that every rank runs the
    same forward and backward DDP expects, adding nothing."""
    world, me, n = world_size(), rank(), len(batch)
    start = me * (n // world) + min(me, n % world)
    mine = batch[start: start + n // world + (me < n % world)]
    if not mine:
        return Shard(batch[:1], 0.0)
    return Shard(mine, world * len(mine) / n)


def global_mean(local_sum: float) -> float:
    """The sum over ranks of a per-rank contribution to a mean (each rank's weight / world times its loss)."""
    if not (dist.is_available() and dist.is_initialized()):
        return local_sum
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None  # NCCL: GPU tensors
    total = torch.tensor([local_sum], dtype=torch.float64, device=on)
    dist.all_reduce(total)
    return float(total)


def launch(processes: int, argv: list[str]) -> int:
    """Run ``python -m openbook <argv>`` in ``processes`` local processes through torchrun's elastic launcher
    (:mod:`torch.distributed.run`, ``--standalone``: a rendezvous on a free local port). Each process prints its
    own errors; a failure ends all of them and becomes one line here. The launcher's log folder (its per-process
    error files; without one it makes a ``torchelastic_*`` folder in the temporary directory and leaves it there)
    is a temporary one, removed when the processes have ended."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="openbook-torchrun-") as logs:
        return _launch(processes, argv, logs)


def _launch(processes: int, argv: list[str], log_dir: str) -> int:
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = torchrun.parse_args(["--standalone", f"--nproc-per-node={processes}", "--max-restarts=0",
                                f"--log-dir={log_dir}", "--module", "openbook"])
    # openbook's own arguments bypass torchrun's parser, which would read `--nproc N` in them as an
    # ambiguous abbreviation of its --nproc-per-node (argparse matches prefixes even in the script's args)
    args.training_script_args = list(argv)
    quiet = logging.getLogger("torch.distributed.elastic")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the agent's own failure tables; the processes' errors still print
    try:
        torchrun.run(args)
    except ChildFailedError as failed:
        codes = sorted({f.exitcode for f in failed.failures.values()})
        raise OpenbookError(f"distributed training failed: {len(failed.failures)} of {processes} processes "
                            f"exited with code {', '.join(map(str, codes))} (see their messages above)") from None
    finally:
        quiet.setLevel(level)
    return 0
