"""One RAG training step (forward + backward), openbook vs transformers' RagSequenceForGeneration / RagTokenForGeneration.

Both sides use the *same* modules, built once from a fixed seed: a randomly initialised BART-base-shaped
generator (BART-base sizes, ``init_std`` 0.02) and a DPR/BERT-base-shaped question encoder, and the same
batch of ``--questions`` (question, k passages, answer) examples. The document scores are
``d(z)·q(x)`` with q(x) from the question encoder, so the backward pass reaches the query encoder and the
generator on both sides, as in the paper's training (the document encoder is frozen; here the document
vectors are fixed random tensors).

transformers: ``model(context_input_ids=..., context_attention_mask=..., doc_scores=..., labels=...,
n_docs=k).loss.sum().backward()``. openbook: ``Seq2SeqGenerator.encode`` + ``target_logprobs`` +
``rag_sequence_nll`` / ``rag_token_nll`` (what ``RAG.loss`` runs after retrieval), ``.sum().backward()``.

Context lengths are realistic: each (question, passage) context is ``title / text // question`` for a
passage of the shipped demo corpus (100-word Wikipedia passages) and a 12-token question, measured with
a WordPiece tokenizer (the packaged MiniLM's; BART's BPE is not available offline and gives similar
counts) and capped at 300. The benchmark reports two comparisons:

* ``as prepared`` (the headline): each library's own batch layout. transformers' ``RagRetriever`` pads
  every context to ``max_combined_length`` = 300 (``padding="max_length"`` in ``postprocess_docs``), so
  its model runs on 300-token rows; openbook pads to the longest context of the batch. The token ids of
  every real position are identical and pads are masked, so the losses agree (checked).
* ``same tensors``: transformers is given openbook's longest-padded tensors. openbook's encoder still
  runs them in length groups (``Seq2SeqGenerator.encode``: rows sorted by length, each group cut to its
  own longest row, so the pads inside a batch cost nothing); ``openbook one padded block`` switches that
  off (``length_group_cost = None``), which is the pure model-code comparison with every padding
  difference removed.

Also reported: openbook with bfloat16 autocast (``openbook train --mixed-precision``),
against transformers in float32 — a different precision, so its loss is compared with a tolerance.

Timings are wall-clock medians over ``--repeats`` interleaved rounds after one untimed warm-up round;
gradients are zeroed between steps (no optimizer step, so every round computes the same thing), and dropout
is off (eval mode) on both sides so that they compute the same function.

Usage:  PYTHONPATH=. python bench/train_step.py [--questions 4] [--k 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import torch
from _common import BART_BASE, print_header, quiet

from openbook.models.generators import GROUP_COST_TOKENS

QUESTION_TOKENS = 12
MAX_COMBINED_LENGTH = 300  # transformers' RagConfig.max_combined_length
METHODS = ("hf_seq_300", "hf_seq_same", "ours_seq", "ours_seq_onepad", "ours_seq_bf16",
           "hf_tok_300", "hf_tok_same", "ours_tok", "ours_tok_onepad", "ours_tok_bf16")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=4, help="examples per batch")
    p.add_argument("--k", type=int, default=5, help="documents per question")
    p.add_argument("--answer-tokens", type=int, default=8, help="longest answer, in tokens (with EOS)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def context_lengths(n: int, seed: int) -> list[int]:
    """Token counts of ``title / text // question`` contexts for ``n`` random demo passages."""
    import gzip
    import random

    from transformers import AutoTokenizer

    from openbook.data import demo_passages_path
    from openbook.models.loading import packaged_minilm_path

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_minilm_path()))
    with gzip.open(demo_passages_path(), "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(5000), fh)]
    picked = random.Random(seed).sample(rows, n)
    lengths = [len(tokenizer(f"{r['title']} / {r['text']} //")["input_ids"]) + QUESTION_TOKENS for r in picked]
    return [min(length, MAX_COMBINED_LENGTH) for length in lengths]


def build(args):
    quiet()
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        DPRConfig,
        DPRQuestionEncoder,
        RagConfig,
        RagSequenceForGeneration,
        RagTokenForGeneration,
    )

    from openbook.models.generators import Contexts, Seq2SeqGenerator

    torch.manual_seed(args.seed)
    gen = BartForConditionalGeneration(BartConfig(**BART_BASE, init_std=0.02))
    qe = DPRQuestionEncoder(DPRConfig())
    config = RagConfig.from_question_encoder_generator_configs(qe.config, gen.config, n_docs=args.k)
    hf = {"seq": RagSequenceForGeneration(config=config, question_encoder=qe, generator=gen),
          "tok": RagTokenForGeneration(config=config, question_encoder=qe, generator=gen)}
    for model in hf.values():
        model.eval()  # dropout off, so that both sides compute the same function; gradients still flow
    ours = Seq2SeqGenerator(gen, tokenizer=None)

    B, K = args.questions, args.k
    g = torch.Generator().manual_seed(args.seed + 1)
    lengths = context_lengths(B * K, args.seed)
    longest = max(lengths)
    ids = torch.full((B * K, MAX_COMBINED_LENGTH), gen.config.pad_token_id, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(4, BART_BASE["vocab_size"], (n,), generator=g)
        ids[row, 0], ids[row, n - 1] = gen.config.bos_token_id, gen.config.eos_token_id
    mask = ids.ne(gen.config.pad_token_id).long()
    padded = Contexts(ids, mask, K)  # transformers' layout: every row 300 tokens
    tight = Contexts(ids[:, :longest].contiguous(), mask[:, :longest].contiguous(), K)  # openbook's layout

    q_ids = torch.randint(1000, qe.config.vocab_size, (B, QUESTION_TOKENS), generator=g)
    doc_vectors = torch.randn(B, K, qe.config.hidden_size, generator=g) / qe.config.hidden_size ** 0.5
    # answers: 2 .. answer_tokens tokens ending in EOS, right-padded (openbook's targets)
    T = args.answer_tokens
    targets = torch.full((B, T), gen.config.pad_token_id, dtype=torch.long)
    for b in range(B):
        n = int(torch.randint(2, T + 1, (1,), generator=g))
        targets[b, : n - 1] = torch.randint(4, BART_BASE["vocab_size"], (n - 1,), generator=g)
        targets[b, n - 1] = gen.config.eos_token_id
    start = torch.full((B, 1), ours.start_token_id, dtype=torch.long)
    labels = torch.cat([start, targets], dim=1)  # transformers' labels start with the decoder start token
    return dict(gen=gen, qe=qe, hf=hf, ours=ours, padded=padded, tight=tight, q_ids=q_ids,
                doc_vectors=doc_vectors, targets=targets, labels=labels, lengths=lengths, args=args)


def doc_scores(env) -> torch.Tensor:
    q = env["qe"](input_ids=env["q_ids"], attention_mask=torch.ones_like(env["q_ids"])).pooler_output  # (B, H)
    return torch.bmm(env["doc_vectors"], q[:, :, None])[:, :, 0]  # (B, K), differentiable w.r.t. q(x)


def step(env, name: str) -> float:
    """One forward + backward; returns the summed loss."""
    from openbook.rag.marginal import doc_log_prior, rag_sequence_nll, rag_token_nll

    env["gen"].zero_grad(set_to_none=True)
    env["qe"].zero_grad(set_to_none=True)
    kind = "seq" if "_seq" in name else "tok"
    K = env["args"].k
    if name.startswith("hf_"):
        ctx = env["padded"] if name.endswith("_300") else env["tight"]
        loss = env["hf"][kind](context_input_ids=ctx.input_ids, context_attention_mask=ctx.attention_mask,
                               doc_scores=doc_scores(env), labels=env["labels"], n_docs=K).loss.sum()
    else:
        ours, targets = env["ours"], env["targets"]
        ours.length_group_cost = None if name.endswith("_onepad") else GROUP_COST_TOKENS
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name.endswith("_bf16")):
            scores = doc_scores(env)
            memory = ours.encode(env["tight"])
            B = targets.shape[0]
            lp = ours.target_logprobs(memory, torch.arange(B * K), targets.repeat_interleave(K, 0))
            lp = lp.view(B, K, targets.shape[1], -1)
            nll = rag_sequence_nll if kind == "seq" else rag_token_nll
            loss = nll(lp.float(), doc_log_prior(scores.float()), targets, targets.ne(ours.pad_token_id)).sum()
    loss.backward()
    return float(loss.detach())


def grads(env) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in (env["gen"].model.shared.weight, env["qe"].question_encoder
                                                  .bert_model.embeddings.word_embeddings.weight)])


def main(argv=None) -> None:
    args = parse_args(argv)
    print_header()
    t0 = time.perf_counter()
    env = build(args)
    lengths = env["lengths"]
    print(f"workload:      {args.questions} questions x k={args.k} passages, answers up to {args.answer_tokens} "
          f"tokens, {args.repeats} repeats; built in {time.perf_counter() - t0:.0f}s")
    print(f"contexts:      token lengths min/median/max {min(lengths)}/{statistics.median(lengths):g}/{max(lengths)} "
          f"(demo passages); openbook pads to {max(lengths)}, transformers' retriever to {MAX_COMBINED_LENGTH}")

    losses, gradients = {}, {}
    for name in METHODS:  # warm-up round (untimed), also records losses and gradients
        losses[name] = step(env, name)
        gradients[name] = grads(env).clone()
    times = {name: [] for name in METHODS}
    for r in range(args.repeats):
        order = METHODS if r % 2 == 0 else METHODS[::-1]
        for name in order:
            gc.collect()
            t = time.perf_counter()
            step(env, name)
            times[name].append(time.perf_counter() - t)
        print(f"  round {r + 1}/{args.repeats}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n in METHODS), flush=True)

    def agree(a: str, b: str, rtol: float) -> bool:
        close_loss = abs(losses[a] - losses[b]) <= rtol * max(1.0, abs(losses[b]))
        diff = (gradients[a] - gradients[b]).norm() / gradients[b].norm().clamp_min(1e-12)
        return close_loss and float(diff) <= (1e-3 if rtol < 1e-3 else 0.1)

    checks = {}
    for kind in ("seq", "tok"):
        reference = f"hf_{kind}_300"
        checks[f"{kind}_openbook_float32"] = agree(f"ours_{kind}", reference, 1e-5)
        checks[f"{kind}_openbook_one_padded_block"] = agree(f"ours_{kind}_onepad", reference, 1e-5)
        checks[f"{kind}_transformers_same_tensors"] = agree(f"hf_{kind}_same", reference, 1e-5)
        checks[f"{kind}_openbook_bfloat16"] = agree(f"ours_{kind}_bf16", reference, 1e-2)
    med = {name: statistics.median(v) for name, v in times.items()}
    ratio = lambda hf, ours: med[hf] / med[ours]  # noqa: E731
    print()
    print(f"{'method':52s} {'median s':>9s} {'loss':>12s}")
    labels = {
        "hf_seq_300": "RAG-Sequence transformers (contexts padded to 300)",
        "hf_seq_same": "RAG-Sequence transformers (openbook's tensors)",
        "ours_seq": "RAG-Sequence openbook float32",
        "ours_seq_onepad": "RAG-Sequence openbook float32, one padded block",
        "ours_seq_bf16": "RAG-Sequence openbook bfloat16 autocast",
        "hf_tok_300": "RAG-Token    transformers (contexts padded to 300)",
        "hf_tok_same": "RAG-Token    transformers (openbook's tensors)",
        "ours_tok": "RAG-Token    openbook float32",
        "ours_tok_onepad": "RAG-Token    openbook float32, one padded block",
        "ours_tok_bf16": "RAG-Token    openbook bfloat16 autocast",
    }
    for name in METHODS:
        print(f"{labels[name]:52s} {med[name]:9.2f} {losses[name]:12.5f}")
    print()
    result = {
        "rag_sequence_speedup": round(ratio("hf_seq_300", "ours_seq"), 3),
        "rag_token_speedup": round(ratio("hf_tok_300", "ours_tok"), 3),
        "rag_sequence_speedup_same_tensors": round(ratio("hf_seq_same", "ours_seq"), 3),
        "rag_token_speedup_same_tensors": round(ratio("hf_tok_same", "ours_tok"), 3),
        "rag_sequence_speedup_one_padded_block": round(ratio("hf_seq_same", "ours_seq_onepad"), 3),
        "rag_token_speedup_one_padded_block": round(ratio("hf_tok_same", "ours_tok_onepad"), 3),
        "rag_sequence_speedup_bf16": round(ratio("hf_seq_300", "ours_seq_bf16"), 3),
        "rag_token_speedup_bf16": round(ratio("hf_tok_300", "ours_tok_bf16"), 3),
        "losses_and_gradients_agree": checks,
        "seconds": {name: round(v, 3) for name, v in med.items()},
        "questions": args.questions,
        "k": args.k,
        "context_tokens_max": max(lengths),
    }
    print("speedup = transformers median step time / openbook median step time (same process, interleaved)")
    print(f"RAG-Sequence: {result['rag_sequence_speedup']}x as prepared, {result['rag_sequence_speedup_same_tensors']}x "
          f"on the same tensors, {result['rag_sequence_speedup_bf16']}x with bfloat16 autocast")
    print(f"RAG-Token:    {result['rag_token_speedup']}x as prepared, {result['rag_token_speedup_same_tensors']}x "
          f"on the same tensors, {result['rag_token_speedup_bf16']}x with bfloat16 autocast")
    print(f"one padded block (no length groups): RAG-Sequence {result['rag_sequence_speedup_one_padded_block']}x, "
          f"RAG-Token {result['rag_token_speedup_one_padded_block']}x against transformers on the same tensors")
    print(f"losses and gradients agree with transformers (1e-5 float32, 1e-2 bfloat16): {checks}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
