"""A tiny RAG fine-tuned by :func:`openbook.train.train`, in one process or in each process torchrun starts:
``python -m torch.distributed.run --standalone --nproc-per-node 2 tests/helpers/ddp_worker.py KB OUT --max-steps 4``.
Every process builds the same random models (fixed seeds, no dropout, so that 1 and N processes compute the
same thing); the final weights are OUT/checkpoint/model.safetensors. Used by tests/train/test_train_ddp.py and
bench/_scale_ddp.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertModel

sys.path.insert(0, str(Path(__file__).resolve().parent))

from openbook.index import KnowledgeBase  # noqa: E402
from openbook.models.encoders import Encoder  # noqa: E402
from openbook.models.generators import Seq2SeqGenerator  # noqa: E402
from openbook.rag import RAG  # noqa: E402
from openbook.rag.assemble import build_knowledge_base  # noqa: E402
from openbook.train import TrainConfig, train  # noqa: E402
from tiny import PASSAGES, bart_tokenizer, bert_tokenizer, tiny_bart  # noqa: E402

# 7 pairs: batches of 4 end an epoch with 3 (shards of 2 and 1); batches of 2 with 1 (one rank gets none)
EXAMPLES = [("capital of france", "paris"), ("who wrote the sun rises", "hemingway"), ("largest ocean", "pacific"),
            ("largest mountain", "everest"), ("first nobel prize", "physics"), ("president of peru", "peru"),
            ("the capital", "paris")]


def encoder() -> Encoder:
    torch.manual_seed(0)
    tok = bert_tokenizer()
    config = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return Encoder(BertModel(config).eval(), tok, pooling="mean", normalize=True, name="tiny-bert-ddp")


def build_kb(path: Path):
    return build_knowledge_base(PASSAGES, encoder(), path, progress=False)


def make_rag(kb, d_model: int = 32, layers: int = 2) -> RAG:
    tok = bart_tokenizer()
    bart = tiny_bart(vocab_size=len(tok), seed=11, init_std=0.05, d_model=d_model, layers=layers, dropout=0.0)
    return RAG(encoder(), Seq2SeqGenerator(bart, tok), kb, model="rag-sequence", k=3, learn_scale=True)


def config(max_steps: int, batch_size: int, grad_accumulation: int = 1, checkpoint_every: int = 1000) -> TrainConfig:
    return TrainConfig(k=3, max_steps=max_steps, batch_size=batch_size, grad_accumulation=grad_accumulation,
                       lr_generator=1e-3, lr_query_encoder=1e-3, checkpoint_every=checkpoint_every, epochs=1)


def kill_in_step(rag: RAG, step: int, grad_accumulation: int) -> None:
    """This process kills itself (SIGKILL) at its first loss of optimiser step ``step``: mid-step, before the
    gradient all-reduce its peers wait in, as a crashed machine would."""
    calls, loss = [0], rag.loss

    def counted(*args, **kwargs):
        calls[0] += 1
        if calls[0] > (step - 1) * grad_accumulation:
            os.kill(os.getpid(), signal.SIGKILL)
        return loss(*args, **kwargs)

    rag.loss = counted


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("kb")
    p.add_argument("out")
    p.add_argument("--max-steps", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--grad-accumulation", type=int, default=1)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1, help="the examples this many times over (a longer epoch)")
    p.add_argument("--float64", action="store_true", help="train in float64: rounding far below any real effect")
    p.add_argument("--timing", metavar="FILE", help="rank 0 writes {seconds, steps} of training here (JSON)")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--checkpoint-every", type=int, default=1000)
    p.add_argument("--kill-rank-1-in-step", type=int, metavar="STEP", help="rank 1 kills itself mid-step STEP")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rag = make_rag(KnowledgeBase.load(args.kb), args.d_model, args.layers)
    if args.float64:
        rag.double()
    if args.kill_rank_1_in_step and int(os.environ.get("RANK", 0)) == 1:
        kill_in_step(rag, args.kill_rank_1_in_step, args.grad_accumulation)
    started = time.perf_counter()
    state = train(rag, EXAMPLES * args.repeat, config(args.max_steps, args.batch_size, args.grad_accumulation, args.checkpoint_every),
                  args.out, resume=args.resume, progress=False)
    if args.timing and int(os.environ.get("RANK", 0)) == 0:
        Path(args.timing).write_text(json.dumps({"seconds": time.perf_counter() - started, "steps": state.step}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
