"""The RAG-Token document posterior per generated token (paper Figure 2): generate an answer with
RAG-Token and show, for every token y_i, p(z_i | x, y_i, y_<i) over the retrieved documents. In the paper
(input "Hemingway") the posterior is high on the document that holds a title while the title's first
token is written and flattens once the generator can finish it from its parameters.

To find such an example, :func:`run_posterior` also takes many inputs (``inputs``, e.g. the held-out
Jeopardy answers), decodes each and shows the generation with the largest hand-over
(:func:`handover`): the largest posterior mass moved between two of its tokens whose most probable
documents differ."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from openbook.experiments.report import DEFAULT, finish, heatmap, model_of_run
from openbook.presets import PAPER


def token_labels(tokenizer, tokens: list[str]) -> list[str]:
    """Readable token strings ("Ġthe" -> " the")."""
    if tokenizer is None:
        return list(tokens)
    return [tokenizer.convert_tokens_to_string([t]) for t in tokens]


@dataclass
class Handover:
    """The largest hand-over of one generation: between token ``start`` (most probable document
    ``source``) and the later token ``end`` (most probable document ``target`` != ``source``), ``moved`` =
    the total variation distance between the two tokens' document posteriors, 1/2 sum_z |p_start(z) -
    p_end(z)|: the posterior mass that moved. 0 (and -1 positions) when the argmax document never changes."""

    moved: float = 0.0
    start: int = -1
    end: int = -1
    source: int = -1
    target: int = -1


def handover(posteriors: Sequence[Sequence[float]], tokens: int | None = None) -> Handover:
    """The largest hand-over (:class:`Handover`) in ``posteriors`` (tokens x documents, one distribution per
    token), over all token pairs s < t within the first ``tokens`` tokens (default: all; leave out EOS)."""
    rows = [list(row) for row in posteriors[: len(posteriors) if tokens is None else tokens]]
    argmax = [max(range(len(row)), key=row.__getitem__) for row in rows]
    best = Handover()
    for s, first in enumerate(rows):
        for t in range(s + 1, len(rows)):
            if argmax[s] == argmax[t]:
                continue
            moved = 0.5 * sum(abs(a - b) for a, b in zip(first, rows[t]))
            if moved > best.moved:
                best = Handover(moved, s, t, argmax[s], argmax[t])
    return best


def content_tokens(answer, eos: str | None) -> int:
    """How many of the answer's tokens come before its EOS (the EOS carries no content)."""
    tokens = list(answer.tokens)
    return len(tokens) - 1 if tokens and eos is not None and tokens[-1] == eos else len(tokens)


MIN_MOVED = 0.1  # a smaller change of the most probable document is a near-tie, not a hand-over


def hands_over(h: Handover, min_moved: float = MIN_MOVED) -> bool:
    return h.moved > 0 and h.moved >= min_moved


def pick_handover(answers: Sequence, eos: str | None = None, min_moved: float = MIN_MOVED) -> tuple[int, list[Handover]]:
    """``(index of the answer with the largest hand-over, every answer's Handover)``; the first of equals.
    ``answers`` are RAG-Token Answers (``tokens``, ``token_posteriors``). An index of -1: no answer hands
    over by at least ``min_moved`` of the posterior mass."""
    found = [handover(a.token_posteriors or [], content_tokens(a, eos)) for a in answers]
    best = max(range(len(found)), key=lambda i: (found[i].moved, -i), default=-1)
    return (best if best >= 0 and hands_over(found[best], min_moved) else -1), found


def run_posterior(run: str, question: str | None, out_dir: str | Path, k: int = 5, beams: int = PAPER.num_beams,
                  max_new_tokens: int | None = PAPER.max_new_tokens, kb: str | None = None, as_json: bool = False,
                  inputs: list[str] | None = None, batch_size: int = 8, min_moved: float = MIN_MOVED,
                  device: str = "auto", task: str = "jeopardy") -> int:
    """Decode ``question`` with the run's weights as RAG-Token (whatever it was trained as) and plot the
    per-token document posterior; or decode every one of ``inputs`` and plot the one with the largest
    hand-over (:func:`pick_handover`; at least ``min_moved``), listing every candidate's in the report.
    ``max_new_tokens=None`` is the answer length of ``task`` (the paper's Figure 2 is a Jeopardy generation)."""
    from openbook.errors import InputError
    from openbook.eval.tasks import get_task

    if max_new_tokens is None:
        max_new_tokens = get_task(task).default_max_new_tokens

    rag = model_of_run(run, kb=kb, decode_as="rag-token", device=device)
    options = {"k": k, "num_beams": beams, "max_new_tokens": max_new_tokens, "abstain": PAPER.abstain}
    search = None
    if inputs:
        answers = [a for start in range(0, len(inputs), batch_size)
                   for a in rag.ask(inputs[start: start + batch_size], **options)]
        chosen, found = pick_handover(answers, getattr(rag.generator.tokenizer, "eos_token", None), min_moved)
        candidates = [{"input": a.question, "answer": a.answer, **asdict(h)} for a, h in zip(answers, found)]
        search = {"inputs": len(inputs), "min_moved": min_moved,
                  "handing_over": sum(hands_over(h, min_moved) for h in found), "chosen": chosen,
                  "candidates": sorted(candidates, key=lambda c: -c["moved"])}
        if chosen < 0:
            top = search["candidates"][0] if candidates else {"moved": 0.0, "input": "-"}
            finish(out_dir, "RAG-Token hand-over search: no generation hands over", ["inputs"], [[len(inputs)]],
                   {"chosen": None}, {"search": search}, as_json,
                   notes=f"No generation's most probable document changes with at least {min_moved} of the posterior "
                         f"mass moving; the largest: {top['moved']:.3f} ({top['input']!r}).")
            raise InputError(f"none of the {len(inputs)} generations hands over from one document to another by at "
                             f"least {min_moved} of the posterior mass (candidates in {Path(out_dir) / 'report.json'})")
        answer = answers[chosen]
    else:
        (answer,) = rag.ask([question], **options)
    question = answer.question
    tokens = token_labels(rag.generator.tokenizer, answer.tokens)
    titles = [f"{j + 1}. {p.title}" for j, p in enumerate(answer.passages)]
    matrix = [[row[j] for row in answer.token_posteriors] for j in range(len(titles))]  # documents x tokens
    heatmap(Path(out_dir) / "posterior.png", matrix, tokens, titles,
            f"RAG-Token p(z | x, y_i, y_<i): {question[:60]}")
    headers = ["document", "p(z|x)"] + [t if t.strip() else repr(t) for t in tokens]
    rows = [[title, f"{p.prob:.3f}"] + [f"{v:.2f}" for v in values]
            for title, p, values in zip(titles, answer.passages, matrix)]
    documents = [{"id": p.id, "title": p.title, "prob": p.prob, "posterior": p.posterior} for p in answer.passages]
    headline = {"question": question, "answer": answer.answer, "tokens": tokens,
                "documents": [p.title for p in answer.passages], "posterior": matrix}
    notes = (f"Answer: {answer.answer!r}. Rows: the retrieved documents; columns: the generated tokens "
             "(EOS last); cells: the document posterior at that token.")
    if search is not None:
        h = found[chosen]
        headline["handover"] = asdict(h)
        notes += (f"\n\nChosen from {len(inputs)} inputs ({search['handing_over']} of whose generations hand over): "
                  f"the largest hand-over, {h.moved:.2f} of the posterior mass moving from document {h.source + 1} "
                  f"(most probable at token {h.start + 1}, {tokens[h.start]!r}) to document {h.target + 1} (most "
                  f"probable at token {h.end + 1}, {tokens[h.end]!r}). A hand-over: two tokens whose most probable "
                  "documents differ; its size: the total variation distance between their document posteriors "
                  f"(at least {min_moved} to count).")
    return finish(out_dir, f"RAG-Token document posterior per token (paper Figure 2): {question}", headers, rows,
                  headline, {"run": run if run != DEFAULT else DEFAULT, "k": k, "beams": beams,
                             "documents": documents, "answer": answer.to_dict(full=True),
                             **({"search": search} if search else {})}, as_json, notes=notes)
