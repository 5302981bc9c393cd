"""RAG decoding speed and memory: openbook vs transformers' RagSequenceForGeneration / RagTokenForGeneration.

Both sides run on the *same* modules (one randomly initialised BART-base-shaped generator and one
DPR/BERT-base-shaped question encoder, built once from a fixed seed) and the *same* tensors
(``context_input_ids``, ``context_attention_mask``, ``doc_scores``), under ``torch.no_grad()``:

* RAG-Sequence (Thorough): ``RagSequenceForGeneration.generate`` vs ``generator.encode`` +
  ``rag_sequence_decode(..., "thorough")``;
* RAG-Token: ``RagTokenForGeneration.generate`` vs ``generator.encode`` + ``rag_token_decode``;
* RAG-Sequence Fast: openbook only (transformers has no Fast decoding).

openbook's time includes ``generator.encode`` (transformers' includes its encoder). Neither includes the
question encoder: ``doc_scores`` (DPR question embeddings of random question ids dotted with random document
vectors) are computed once and passed to both.

Timings are wall-clock medians over ``--repeats`` runs, interleaved in one process (the machine is shared,
so transformers and openbook are measured side by side; odd repeats swap the order) after an untimed
one-question warm-up. Every comparison of generated tokens (trailing pads stripped; transformers' leading
decoder-start token dropped) must match for ``identical`` to be true.

Peak memory (``--memory inline``, the default): around the first timed call of each method, after ``gc``
and ``malloc_trim(0)``, the kernel's RSS high-water mark is reset and VmHWM - VmRSS-before is the call's
peak. With ``--memory child`` each measured call instead runs once more in a fresh *spawned* child process
that rebuilds the same seeded models and inputs, runs ``gc`` and ``malloc_trim(0)``, resets the kernel's RSS high-water mark
(``echo 5 > /proc/self/clear_refs``), reads its RSS and makes the call; peak MB = VmHWM (the high-water mark
of the child's resident set, /proc/self/status) after the call minus VmRSS right before it.
``getrusage().ru_maxrss`` is printed too but not used: in these children it is not lowered by the reset
(it stays at the model-building peak), so its delta would be the same for every method.

Contexts are all full length (no padding): transformers 5.x ``RagSequenceForGeneration.generate`` runs its
per-document beam search with ``attention_mask=None`` and no longer infers a mask from padding for
encoder-decoder models, so padded contexts would make it attend to pad tokens (openbook masks them) and
the two would not compute the same thing.

The random generator is BART-base (``BartConfig()`` defaults are bart-large, so the base sizes are set
explicitly) with ``init_std`` 0.02 and one change: its LM head is untied from the embeddings and drawn with
std ``--head-std``. With the tied head a random BART (at any ``init_std``, 0.02 to 0.5) falls into a one-token
fixed point (``x x x ...``), so answers barely depend on the input and all run to ``max_length``; a large
``init_std`` on the whole model does the same. A random head never picks EOS out of 50k tokens, so
``final_logits_bias[eos]`` is set such that EOS would win at ``--eos-rate`` of greedy decoding positions
(calibrated once on separate random contexts). Answers then differ by input and stop at different lengths;
the run prints how varied they are. The untied head adds 38.6M parameters but no compute.

Usage:  PYTHONPATH=. python bench/decode_vs_transformers.py [--questions 32] [--k 5] [--beams 4]
            [--max-length 20] [--context-length 128] [--repeats 2] [--memory inline|child|off]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import multiprocessing as mp
import os
import resource
import statistics
import time
from types import SimpleNamespace

import torch
from _common import BART_BASE, print_header, quiet
from torch import nn

METHODS = ("hf_seq", "ours_seq", "hf_tok", "ours_tok", "ours_seq_fast")
LABELS = {
    "hf_seq": "RAG-Sequence Thorough  transformers",
    "ours_seq": "RAG-Sequence Thorough  openbook",
    "hf_tok": "RAG-Token              transformers",
    "ours_tok": "RAG-Token              openbook",
    "ours_seq_fast": "RAG-Sequence Fast      openbook (no HF)",
}
QUESTION_LENGTH = 12  # DPR question ids: [CLS] + 10 word pieces + [SEP]
PAD_NOTE = (
    "contexts are full length, no padding: transformers 5.x RagSequenceForGeneration.generate runs its "
    "per-document beam search with attention_mask=None and no longer infers a mask from padding for "
    "encoder-decoder models, so padded contexts would make it attend to pads (openbook masks them)"
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--k", type=int, default=5, help="documents per question (n_docs)")
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--max-length", type=int, default=20, help="generate()'s max_length (counts the start token)")
    p.add_argument("--context-length", type=int, default=128, help="generator input tokens per (question, doc)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--memory", choices=("inline", "child", "off"), default="inline",
                   help="peak-RSS measurement: around the first timed call of each method (inline), in a "
                   "fresh spawned child per method (child: cleaner, twice the run time), or not at all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-std", type=float, default=0.02, help="BartConfig.init_std (body weights)")
    p.add_argument("--head-std", type=float, default=0.35, help="std of the untied LM head")
    p.add_argument("--eos-rate", type=float, default=0.1,
                   help="fraction of greedy decoding positions at which the EOS bias makes EOS win")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------- setup


def _calibrate_eos_bias(gen, args, vocab: int) -> float:
    """The EOS logit bias at which EOS would be the argmax at ``eos_rate`` of greedy decoding positions."""
    g = torch.Generator().manual_seed(args.seed + 1000)
    ids = torch.randint(4, vocab, (8, args.context_length), generator=g)
    ids[:, 0], ids[:, -1] = 0, 2
    with torch.no_grad():
        seqs = gen.generate(ids, num_beams=1, do_sample=False, max_length=args.max_length)
        logits = gen(input_ids=ids, decoder_input_ids=seqs).logits
    eos = gen.config.eos_token_id
    gap = logits.max(-1).values - logits[..., eos]
    return float(torch.quantile(gap.flatten().double(), args.eos_rate))


def build(args) -> SimpleNamespace:
    """Models (same seed -> same weights in every process) and the benchmark inputs."""
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

    from openbook.models.generators import Seq2SeqGenerator

    torch.manual_seed(args.seed)
    gen = BartForConditionalGeneration(BartConfig(**BART_BASE, init_std=args.init_std)).eval()
    qe = DPRQuestionEncoder(DPRConfig()).eval()
    config = RagConfig.from_question_encoder_generator_configs(qe.config, gen.config, n_docs=args.k)
    hf_tok = RagTokenForGeneration(config=config, question_encoder=qe, generator=gen).eval()
    hf_seq = RagSequenceForGeneration(config=config, question_encoder=qe, generator=gen).eval()
    assert hf_tok.generator is gen and hf_seq.generator is gen
    # untie the LM head only (encoder/decoder embeddings stay shared, as in BART-base); done after the RAG
    # wrappers are built so that nothing re-ties it
    vocab, d_model = gen.config.vocab_size, gen.config.d_model
    head = torch.randn(vocab, d_model, generator=torch.Generator().manual_seed(args.seed + 1)) * args.head_std
    gen.lm_head.weight = nn.Parameter(head)
    gen.config.tie_word_embeddings = False
    with torch.no_grad():
        gen.final_logits_bias.zero_()
        eos_bias = _calibrate_eos_bias(gen, args, vocab)
        gen.final_logits_bias[0, gen.config.eos_token_id] = eos_bias
    assert gen.get_output_embeddings().weight is gen.lm_head.weight
    assert gen.lm_head.weight.data_ptr() != gen.model.shared.weight.data_ptr()
    ours = Seq2SeqGenerator(gen, tokenizer=None)

    Q, K, L = args.questions, args.k, args.context_length
    g = torch.Generator().manual_seed(args.seed + 2)
    ctx_ids = torch.randint(4, vocab, (Q * K, L), generator=g)
    ctx_ids[:, 0], ctx_ids[:, -1] = gen.config.bos_token_id, gen.config.eos_token_id  # <s> ... </s>
    ctx_mask = torch.ones_like(ctx_ids)
    q_ids = torch.randint(1000, qe.config.vocab_size, (Q, QUESTION_LENGTH), generator=g)
    q_ids[:, 0], q_ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    hidden = qe.config.hidden_size
    with torch.no_grad():
        q_emb = qe(input_ids=q_ids, attention_mask=torch.ones_like(q_ids)).pooler_output  # (Q, H)
    # K document vectors per question; 2/sqrt(H) makes scores spread over a few nats like DPR's top-k
    doc_emb = torch.randn(Q, K, hidden, generator=g) * (2.0 / math.sqrt(hidden))
    doc_scores = torch.bmm(q_emb[:, None, :], doc_emb.transpose(1, 2))[:, 0].sort(-1, descending=True).values
    return SimpleNamespace(gen=gen, ours=ours, hf_tok=hf_tok, hf_seq=hf_seq, ctx_ids=ctx_ids, ctx_mask=ctx_mask,
                           doc_scores=doc_scores, eos_bias=eos_bias, args=args)


# ----------------------------------------------------------------------------------------------- calls


def strip(rows: list[list[int]], pad: int) -> list[list[int]]:
    out = []
    for row in rows:
        while row and row[-1] == pad:
            row = row[:-1]
        out.append(row)
    return out


def call(env, name: str, questions: int | None = None) -> torch.Tensor:
    """One measured call on the first ``questions`` questions; returns the raw output tensor."""
    from openbook.models.generators import Contexts
    from openbook.rag.decoding import beam_config_for, rag_sequence_decode, rag_token_decode
    from openbook.rag.marginal import doc_log_prior

    a = env.args
    n = questions if questions is not None else a.questions
    ids, mask, scores = env.ctx_ids[: n * a.k], env.ctx_mask[: n * a.k], env.doc_scores[:n]
    with torch.no_grad():
        if name.startswith("hf_"):
            model = env.hf_seq if name == "hf_seq" else env.hf_tok
            return model.generate(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores,
                                  n_docs=a.k, num_beams=a.beams, max_length=a.max_length)
        ours = env.ours
        memory = ours.encode(Contexts(ids, mask, a.k))
        prior = doc_log_prior(scores)
        cfg = beam_config_for(ours, num_beams=a.beams, max_length=a.max_length)
        if name == "ours_tok":
            return rag_token_decode(ours, memory, prior, cfg).tokens
        return rag_sequence_decode(ours, memory, prior, cfg, "fast" if name == "ours_seq_fast" else "thorough").tokens


def answers(env, name: str, out: torch.Tensor) -> list[list[int]]:
    """Token lists without trailing pads (and without transformers' decoder-start token)."""
    rows = out[:, 1:].tolist() if name.startswith("hf_") else out[:, 0].tolist()
    return strip(rows, env.ours.pad_token_id)


# ----------------------------------------------------------------------------------------------- memory


def _status_mb(key: str = "VmRSS") -> float:
    """A memory line of /proc/self/status in MB (VmRSS: resident now; VmHWM: resident high-water mark)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> bool:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM, which is what getrusage's ru_maxrss reports
        return True
    except OSError:
        return False


def _memory_child(name: str, args_dict: dict, threads: int, conn) -> None:
    torch.set_num_threads(threads)
    env = build(argparse.Namespace(**args_dict))
    reset = _reset_peak()
    before = _status_mb("VmRSS")
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    out = call(env, name)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    conn.send({"before_mb": before, "maxrss_before_mb": maxrss_before, "peak_mb": peak, "delta_mb": peak - before,
               "hwm_delta_mb": _status_mb("VmHWM") - before, "reset": reset, "wall_s": wall,
               "answers": answers(env, name, out)})
    conn.close()


def measure_memory(args, threads: int) -> dict:
    ctx = mp.get_context("spawn")
    results = {}
    for name in METHODS:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_memory_child, args=(name, vars(args), threads, child))
        proc.start()
        child.close()
        results[name] = parent.recv()
        proc.join()
        r = results[name]
        print(f"  {name:14s} VmHWM - VmRSS before = {r['hwm_delta_mb']:6.0f} MB  (VmRSS before {r['before_mb']:.0f} MB; "
              f"reset ok: {r['reset']}; ru_maxrss after reset {r['maxrss_before_mb']:.0f} MB, after call "
              f"{r['peak_mb']:.0f} MB; run {r['wall_s']:.1f}s)", flush=True)
    return results


# ----------------------------------------------------------------------------------------------- main


def describe(rows: list[list[int]], eos: int, max_new: int) -> str:
    lengths = [len(r) for r in rows]
    stopped = sum(1 for r in rows if r and r[-1] == eos and len(r) < max_new)
    return (f"{len(set(map(tuple, rows)))}/{len(rows)} distinct, length min/median/max "
            f"{min(lengths)}/{statistics.median(lengths):g}/{max(lengths)}, {stopped} ended by EOS before max_length")


def main(argv=None) -> None:
    args = parse_args(argv)
    threads = torch.get_num_threads()
    print_header()
    print(f"workload:      {args.questions} questions x k={args.k} docs, {args.beams} beams, "
          f"max_length={args.max_length}, context length {args.context_length}, {args.repeats} repeats")
    print(f"note:          {PAD_NOTE}")

    t0 = time.perf_counter()
    env = build(args)
    gen = env.gen
    print(f"models:        BART-base-shaped generator ({sum(p.numel() for p in gen.parameters()) / 1e6:.0f}M params, "
          f"untied head, init_std {args.init_std}, head std {args.head_std}, EOS bias {env.eos_bias:.2f}), "
          f"DPR/BERT-base question encoder; built in {time.perf_counter() - t0:.0f}s")
    prior = torch.log_softmax(env.doc_scores, -1).exp()
    print(f"doc_scores:    from the DPR encoder; mean top-1 p(z|x) {prior[:, 0].mean():.2f}, "
          f"mean spread (top-1 - top-k) {(env.doc_scores[:, 0] - env.doc_scores[:, -1]).mean():.2f}")

    # warm-up on one question (not timed)
    for name in METHODS:
        call(env, name, questions=1)

    times = {name: [] for name in METHODS}
    outs: dict[str, list] = {name: [] for name in METHODS}
    mismatches = []
    inline_peaks: dict[str, dict] = {}
    for r in range(args.repeats):
        order = list(METHODS) if r % 2 == 0 else ["ours_seq", "hf_seq", "ours_tok", "hf_tok", "ours_seq_fast"]
        for name in order:
            gc.collect()
            inline = args.memory == "inline" and r == 0
            if inline:
                reset, before = _reset_peak(), _status_mb("VmRSS")
            t = time.perf_counter()
            out = call(env, name)
            if inline:
                inline_peaks[name] = {"hwm_delta_mb": _status_mb("VmHWM") - before, "reset": reset}
            times[name].append(time.perf_counter() - t)
            outs[name].append(answers(env, name, out))
            print(f"  repeat {r + 1}/{args.repeats} {name:14s} {times[name][-1]:8.2f}s  "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
        for hf, mine in (("hf_seq", "ours_seq"), ("hf_tok", "ours_tok")):
            bad = [i for i, (x, y) in enumerate(zip(outs[hf][-1], outs[mine][-1])) if x != y]
            if len(outs[hf][-1]) != len(outs[mine][-1]) or bad:
                mismatches.append((r, hf, mine, bad))
    identical = not mismatches

    peaks = inline_peaks
    if args.memory == "child":
        print("peak memory (fresh spawned child per call):", flush=True)
        peaks = measure_memory(args, threads)
        for hf, mine in (("hf_seq", "ours_seq"), ("hf_tok", "ours_tok")):
            if peaks[hf]["answers"] != peaks[mine]["answers"]:
                identical = False
                mismatches.append(("child", hf, mine, None))

    med = {name: statistics.median(v) for name, v in times.items()}
    speed_seq = med["hf_seq"] / med["ours_seq"]
    speed_tok = med["hf_tok"] / med["ours_tok"]
    eos, max_new = env.ours.eos_token_id, args.max_length - 1
    print()
    print(f"{'method':40s} {'median s':>9s} {'runs s':>18s} {'q/s':>7s} {'speedup':>8s} {'peak MB':>8s}")
    for name in METHODS:
        speed = {"ours_seq": f"{speed_seq:.2f}x", "ours_tok": f"{speed_tok:.2f}x"}.get(name, "")
        peak = f"{peaks[name]['hwm_delta_mb']:.0f}" if peaks else "-"
        runs = ", ".join(f"{x:.1f}" for x in times[name])
        print(f"{LABELS[name]:40s} {med[name]:9.2f} {runs:>18s} {args.questions / med[name]:7.3f} {speed:>8s} "
              f"{peak:>8s}")
    print()
    print("speedup = transformers median wall time / openbook median wall time (same process, interleaved)")
    where = "in a fresh spawned child per call" if args.memory == "child" else "around the first timed call"
    print(f"peak MB = VmHWM after the call - VmRSS before it, {where} (high-water mark reset via "
          "/proc/self/clear_refs after gc and malloc_trim)" if peaks else "peak MB: not measured")
    if peaks and not all(p["reset"] for p in peaks.values()):
        print("WARNING: /proc/self/clear_refs unavailable: VmHWM includes model building (upper bound)")
    print(f"answers RAG-Sequence: {describe(outs['ours_seq'][0], eos, max_new)}")
    print(f"answers RAG-Token:    {describe(outs['ours_tok'][0], eos, max_new)}")
    same_fast = sum(x == y for x, y in zip(outs["ours_seq_fast"][0], outs["ours_seq"][0]))
    print(f"RAG-Sequence Fast answers equal to Thorough: {same_fast}/{args.questions} "
          "(Fast is a different approximation; no transformers counterpart)")
    print(f"identical outputs (every transformers/openbook comparison, all repeats"
          f"{' and memory children' if args.memory == 'child' else ''}): {identical}")
    for r, hf, mine, bad in mismatches:
        print(f"  MISMATCH repeat {r}: {hf} vs {mine}, questions {bad}")
        if bad:
            i = bad[0]
            run = r if isinstance(r, int) else 0
            print(f"    q{i}: transformers {outs[hf][run][i]}\n    q{i}: openbook     {outs[mine][run][i]}")
    print(f"{PAD_NOTE}.")

    result = {
        "rag_sequence_thorough_speedup": round(speed_seq, 3),
        "rag_token_speedup": round(speed_tok, 3),
        "identical": identical,
        "hf_seq_s": round(med["hf_seq"], 3),
        "ours_seq_s": round(med["ours_seq"], 3),
        "hf_tok_s": round(med["hf_tok"], 3),
        "ours_tok_s": round(med["ours_tok"], 3),
        "ours_seq_fast_s": round(med["ours_seq_fast"], 3),
        "peak_mb": {name: round(p["hwm_delta_mb"], 1) for name, p in peaks.items()},
        "questions": args.questions,
        "k": args.k,
        "beams": args.beams,
        "max_length": args.max_length,
        "context_length": args.context_length,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
