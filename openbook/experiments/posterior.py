"""The RAG-Token document posterior per generated token (paper Figure 2): generate an answer with
RAG-Token and show, for every token y_i, p(z_i | x, y_i, y_<i) over the retrieved documents. In the paper
(input "Hemingway") the posterior is high on the document that holds a title while the title's first
token is written and flattens once the generator can finish it from its parameters."""

from __future__ import annotations

from pathlib import Path

from openbook.experiments.report import DEFAULT, finish, heatmap, load_model


def token_labels(tokenizer, tokens: list[str]) -> list[str]:
    """Readable token strings ("Ġthe" -> " the")."""
    if tokenizer is None:
        return list(tokens)
    return [tokenizer.convert_tokens_to_string([t]) for t in tokens]


def run_posterior(run: str, question: str, out_dir: str | Path, k: int = 5, beams: int = 1,
                  max_new_tokens: int = 16, kb: str | None = None, as_json: bool = False) -> int:
    """Decode ``question`` with the run's weights as RAG-Token (whatever it was trained as) and plot the
    per-token document posterior."""
    rag = load_model(run, kb=kb, decode_as="rag-token")
    (answer,) = rag.ask([question], k=k, num_beams=beams, max_new_tokens=max_new_tokens)
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
    return finish(out_dir, f"RAG-Token document posterior per token (paper Figure 2): {question}", headers, rows,
                  headline, {"run": run if run != DEFAULT else DEFAULT, "k": k, "beams": beams,
                             "documents": documents, "answer": answer.to_dict(full=True)}, as_json,
                  notes=f"Answer: {answer.answer!r}. Rows: the retrieved documents; columns: the generated tokens "
                        "(EOS last); cells: the document posterior at that token.")
