"""`openbook train`: fine-tune a RAG model end to end on (input, target) pairs (paper section 2.4)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from openbook.commands import nonnegative_float, options, positive_int


def register(commands) -> None:
    p = commands.add_parser(
        "train",
        help="fine-tune the query encoder and generator on (input, target) pairs",
        description=(
            "Minimise the negative marginal log-likelihood with Adam, updating the query encoder and the "
            "generator; the document encoder and index stay frozen. Data: JSON Lines {input, target}, or "
            "{question, answers} / NQ-open (the first answer is the target); with --task T, any format of that "
            "task (WebQuestions JSON, CuratedTrec TSV, Jeopardy, FEVER, BoolQ ...), read by the task's own reader "
            "into its training targets (one-token labels for FEVER and BoolQ). --out DIR gets the checkpoint and "
            "DIR/run.json, from which openbook.rag.assemble.load_run and `openbook experiments` rebuild the model."
        ),
    )
    options.add_options(p, "model", "kb", "generator", "encoder", "retriever", "k", "device", closed_book=True)
    p.add_argument("--train", required=True, metavar="FILE", help="training pairs (JSONL, .gz ok)")
    p.add_argument("--dev", metavar="FILE", help="dev set, scored with the task's metric (default: exact match)")
    p.add_argument("--task", metavar="T", help="read --train/--dev with this task's reader (see `openbook eval "
                   "--help`: nq, webquestions, curatedtrec, qa, abstractive, jeopardy, fever3, fever2, boolq, "
                   "boolq-passage) and score the dev set with its primary metric")
    p.add_argument("--out", required=True, metavar="DIR", help="run directory: checkpoint, report")
    p.add_argument("--epochs", type=positive_int, default=1)
    p.add_argument("--max-steps", type=positive_int, help="optimiser steps (overrides --epochs)")
    p.add_argument("--batch-size", type=positive_int, default=4)
    p.add_argument("--grad-accumulation", type=positive_int, default=1)
    p.add_argument("--lr-generator", type=nonnegative_float, default=3e-5)
    p.add_argument("--lr-query-encoder", type=nonnegative_float, default=1e-5)
    p.add_argument("--lr-schedule", choices=("constant", "linear"), default="constant",  # trainer.LR_SCHEDULES
                   help="constant, or linear: warm up over --warmup-steps, then fall to zero at the last step "
                        "(transformers' linear schedule; default: %(default)s)")
    p.add_argument("--warmup-steps", type=positive_int, metavar="N",
                   help="steps over which the learning rates rise linearly from 1/N of their value (default: none)")
    p.add_argument("--learn-scale", action="store_true", help="also learn the retrieval score scale")
    p.add_argument("--label-smoothing", type=nonnegative_float, default=0.0)
    p.add_argument("--max-target-length", type=positive_int, default=32, help="longest answer, in tokens (with EOS)")
    p.add_argument("--max-context-length", type=positive_int, metavar="N",
                   help="longest generator input (question + passage), in tokens; longer passages are cut "
                        "(default: the generator's own, 300 for seq2seq as in transformers' RAG, 384 for causal LMs)")
    p.add_argument("--lora", type=positive_int, metavar="R",
                   help="train LoRA adapters of rank R on the generator's linear layers instead of all its weights "
                        "(peft; the checkpoint keeps only the adapters; default: full fine-tuning, as in the paper)")
    p.add_argument("--lora-alpha", type=positive_int, metavar="A", help="LoRA scale numerator (default: 2 R)")
    p.add_argument("--lora-dropout", type=nonnegative_float, default=0.05, metavar="P", help="LoRA dropout (default: %(default)s)")
    p.add_argument("--freeze-retriever", action="store_true", help="the 'Frozen' ablation: q(x) is not updated")
    p.add_argument("--mixed-precision", action="store_true",
                   help="bfloat16 autocast on the --device (on a CPU fast where it has AVX-512 BF16 or AMX; warned "
                   "about elsewhere)")
    p.add_argument("--checkpoint-every", type=positive_int, default=50)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--dev-limit", type=positive_int, default=200, help="dev questions evaluated (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.add_argument("--init", metavar="RUN",
                   help="start from the trained weights of RUN, an `openbook train --out` folder or `default` (the "
                        "shipped default model), instead of the base model: its LoRA adapters (or generator), score "
                        "scale and query encoder; its generator, encoder, LoRA rank, context length and prompt are "
                        "kept (--generator, --encoder, --lora given as well must agree). A new run, not --resume")
    p.add_argument("--nproc", type=positive_int, metavar="N",
                   help="train data-parallel in N local processes (DDP through torchrun; --batch-size is the global "
                        "batch and must divide by N); `torchrun --nproc-per-node N -m openbook train ...` is the same")
    p.set_defaults(handler=run, subparser=p)


def read_pairs(path: str, limit: int | None = None) -> list[tuple[str, str, list[str]]]:
    """(input, target, all gold answers) from {input, target} or {question, answers} JSON Lines: the
    generic ``qa`` task's reader, so the same checks and ``file:line`` errors as ``--task qa``."""
    _, examples = read_task_pairs("qa", path, limit=limit)
    return [(ex.input, ex.target, ex.golds) for ex in examples]


def read_task_pairs(task_name: str, path: str, limit: int | None = None) -> tuple[object, list]:
    """``(task, examples)`` of ``path`` read by the task's own reader; the error names the task and file."""
    from openbook.errors import InputError
    from openbook.eval.tasks import get_task

    task = get_task(task_name)
    examples = task.read(path, limit=limit)
    if not examples:
        raise InputError(f"{path}: no {task.name} examples")
    return task, examples


def task_eval(task, examples: list, k: int, batch_size: int = 8):
    """A dev evaluator scoring with the task's own evaluation (labels by likelihood for classification)."""
    from openbook.eval.evaluate import evaluate as evaluate_task

    def evaluate(rag) -> dict:
        report = evaluate_task(rag, task, examples, k=k, batch_size=batch_size, num_beams=1)
        return {task.primary_metric: report["metrics"][task.primary_metric], "n": report["n"]}

    return evaluate


def exact_match_eval(dev: list[tuple[str, str, list[str]]], k: int, batch_size: int = 8):
    """A dev evaluator: exact match of greedy-ish (2-beam) answers against all gold answers."""
    from openbook.eval.metrics import exact_match

    def evaluate(rag) -> dict:
        scores = []
        for start in range(0, len(dev), batch_size):
            chunk = dev[start: start + batch_size]
            answers = rag.ask([q for q, _, _ in chunk], k=k, num_beams=2, max_new_tokens=16)
            scores += [exact_match(a.answer, golds) for a, (_, _, golds) in zip(answers, chunk)]
        return {"exact_match": sum(scores) / len(scores), "n": len(scores)}

    return evaluate


def _as_path(path: str) -> str:
    return str(Path(path).resolve())


def run(args: argparse.Namespace) -> int:
    from openbook.commands.train_init import init_run, start_from
    from openbook.errors import InputError
    from openbook.rag.assemble import encoder_name, write_run_spec
    from openbook.train import TrainConfig, distributed, train
    from openbook.train.heap import map_large_blocks

    map_large_blocks()  # freed activations go back to the system: the peak RSS stays what a step holds
    if args.nproc is not None:
        distributed.check_batch_size(args.batch_size, args.nproc)
        if not distributed.launched():  # start the N processes, each of which runs this same command line
            return distributed.launch(args.nproc, list(args.argv))
        if args.nproc != distributed.world_size():
            raise InputError(f"--nproc {args.nproc} but torchrun started {distributed.world_size()} processes")
    args.model = args.model or "rag-sequence"
    args.k = args.k or options.DEFAULT_K
    args.retriever = args.retriever or "dense"
    frozen = args.freeze_retriever or args.retriever != "dense"  # BM25 and hybrid scores have no q(x) to train
    if args.task:
        _, train_examples = read_task_pairs(args.task, args.train)
        pairs = [ex.to_pair() for ex in train_examples]
    else:
        pairs = [(x, y) for x, y, _ in read_pairs(args.train)]
    evaluate = None  # the data is read (and checked) before the models load
    if args.dev and args.task:
        evaluate = task_eval(*read_task_pairs(args.task, args.dev, limit=args.dev_limit), k=args.k)
    elif args.dev:
        evaluate = exact_match_eval(read_pairs(args.dev, limit=args.dev_limit), args.k)
    from openbook.models import precision

    if args.mixed_precision and options.device(args).type == "cpu" and not precision.bf16_hardware():
        print("openbook: warning: this CPU has no native bfloat16 (AVX-512 BF16 or AMX); --mixed-precision will "
              "probably be slower than float32", file=sys.stderr)
    lora = None
    if args.lora:
        from openbook.models.adapters import LoraSettings

        lora = LoraSettings(r=args.lora, alpha=args.lora_alpha or 2 * args.lora, dropout=args.lora_dropout)
    init = None
    if args.init:  # checked before the models load
        init, lora = init_run(args, lora)
    rag = options.model_from_args(args, learn_scale=args.learn_scale, untrained=True)
    if lora is not None:
        from openbook.models.adapters import add_lora

        add_lora(rag.generator.model, lora)
    if init is not None:
        start_from(rag, *init)
    if args.max_context_length:
        rag.generator.max_context_length = args.max_context_length
    main = distributed.is_main()  # under torchrun, rank 0 alone writes the run's files and prints
    if main:
        write_run_spec(args.out, model=args.model, generator=args.generator, encoder=encoder_name(args.encoder, args.kb),
                       kb=args.kb, retriever=args.retriever, k=args.k, learn_scale=args.learn_scale,
                       freeze_retriever=frozen, train=_as_path(args.train),
                       task=args.task, max_context_length=rag.generator.max_context_length,
                       lora=lora.to_dict() if lora is not None else None,
                       prompt=getattr(rag.generator, "prompt_settings", dict)() or None,
                       **({"init": str(init[0])} if init else {}))
    cfg = TrainConfig(
        k=args.k, epochs=args.epochs, max_steps=args.max_steps, batch_size=args.batch_size,
        grad_accumulation=args.grad_accumulation, lr_generator=args.lr_generator,
        lr_query_encoder=args.lr_query_encoder, lr_schedule=args.lr_schedule, warmup_steps=args.warmup_steps or 0,
        label_smoothing=args.label_smoothing,
        max_target_length=args.max_target_length, freeze_retriever=frozen, seed=args.seed,
        checkpoint_every=args.checkpoint_every, eval_every=args.eval_every, mixed_precision=args.mixed_precision,
    )
    state = train(rag, pairs, cfg, args.out, resume=args.resume, evaluate=evaluate)
    if not main:
        return 0
    report = {"steps": state.step, "history": state.history, "model": args.model}
    Path(args.out, "report.json").write_text(json.dumps(report, indent=1))
    final = [h for h in state.history if "dev" in h]
    print(json.dumps({"steps": state.step, "last_loss": state.history[-1].get("loss") if state.history else None,
                      "dev": final[-1]["dev"] if final else None}), file=sys.stdout)
    return 0
