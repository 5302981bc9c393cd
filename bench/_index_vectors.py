"""Where bench/index_scale.py's vectors come from: clustered synthetic vectors (its docstring), or a knowledge
base's passage vectors with real questions encoded by that knowledge base's own query encoder.

With a knowledge base, the passage vectors are its ``embeddings.npy`` as :class:`openbook.index.KnowledgeBase`
maps it (every row, deleted passages' included; float16 ones upcast to float32 in memory, float32 ones used
from the map), and the queries are questions encoded by the encoder ``openbook retrieve --kb DIR`` loads for it
(its manifest's encoder, checked against it). The questions: ``--questions FILE`` (JSON Lines ``{question}``),
split by a seeded shuffle into a third for tuning (at most ``--tuning-queries``) and the rest for evaluation
(at most ``--queries``); or by default NQ-open's held-out fifth (``scripts/split_qa_data.py``'s split of
``nq-open-oracle.dev-split.jsonl.gz``, the questions the issues score on) for evaluation, and a seeded sample of
its other four fifths for tuning. Either way no tuning question is an evaluation question.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from _common import NQ_FILE, nq_split

REPO = Path(__file__).resolve().parents[1]
CHUNK = 50_000


@dataclass
class Vectors:
    """The database vectors, the evaluation and tuning queries, and what they are (for the output)."""

    data: np.ndarray
    queries: np.ndarray
    tuning_queries: np.ndarray
    name: str  # "clustered-synthetic" or "knowledge base"
    description: str
    normalised: bool
    extra: dict = field(default_factory=dict)  # put in the JSON line as they are


# -- synthetic ----------------------------------------------------------------------------------------


class ClusteredData:
    """The synthetic generator described in bench/index_scale.py's docstring (structure fixed by ``seed``)."""

    def __init__(self, dim: int, clusters: int = 1000, latent: int = 64, within_var: float = 0.5,
                 latent_share: float = 0.9, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.dim, self.clusters, self.latent = dim, clusters, latent
        self.centres = rng.standard_normal((clusters, dim)).astype(np.float32)
        spectrum = 1.0 / np.arange(1, latent + 1)
        spectrum *= latent_share * within_var * dim / spectrum.sum()  # total latent variance
        basis = rng.standard_normal((latent, dim))
        basis /= np.linalg.norm(basis, axis=1, keepdims=True)  # unit directions (nearly orthogonal)
        self.loadings = (np.sqrt(spectrum)[:, None] * basis).astype(np.float32)
        self.noise_std = math.sqrt((1 - latent_share) * within_var)

    def sample(self, n: int, seed: int, out: np.ndarray | None = None) -> np.ndarray:
        """``n`` points (float32 (n, dim)), generated in chunks into ``out`` if given."""
        out = np.empty((n, self.dim), dtype=np.float32) if out is None else out
        rng = np.random.default_rng(seed)
        for start in range(0, n, CHUNK):
            m = min(CHUNK, n - start)
            chunk = self.centres[rng.integers(0, self.clusters, m)]
            chunk += rng.standard_normal((m, self.latent), dtype=np.float32) @ self.loadings
            chunk += self.noise_std * rng.standard_normal((m, self.dim), dtype=np.float32)
            out[start : start + m] = chunk
        return out

    def describe(self) -> str:
        return (
            f"clustered-synthetic: {self.clusters} Gaussian centres N(0, I_{self.dim}); point = centre + "
            f"{self.latent}-d latent factor (decaying variances) + isotropic noise (std {self.noise_std:.3f}); "
            "not normalised"
        )


def synthetic(n: int, dim: int, queries: int, tuning_queries: int) -> Vectors:
    generator = ClusteredData(dim)
    return Vectors(generator.sample(n, seed=1), generator.sample(queries, seed=2),
                   generator.sample(tuning_queries, seed=3), "clustered-synthetic", generator.describe(), False)


# -- a knowledge base ----------------------------------------------------------------------------------


def read_questions(path: Path) -> list[str]:
    """The ``question`` of each JSON Lines record of ``path`` (ValueError naming the line if one has none)."""
    questions = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON ({exc})") from None
            question = record.get("question") if isinstance(record, dict) else None
            if not isinstance(question, str) or not question.strip():
                raise ValueError(f"{path}:{lineno}: no non-empty string field 'question'")
            questions.append(question.strip())
    return questions


def seeded_split(questions: list[str], queries: int, tuning: int, seed: int) -> tuple[list[str], list[str]]:
    """(evaluation, tuning) questions: a seeded shuffle, a third (at most ``tuning``, at least 1) for tuning, the
    rest (at most ``queries``) for evaluation; a question asked twice stays on one side."""
    unique = list(dict.fromkeys(questions))
    if len(unique) < 2:
        raise ValueError(f"need at least 2 distinct questions (one to tune on, one to evaluate), got {len(unique)}")
    random.Random(seed).shuffle(unique)
    cut = max(1, min(tuning, len(unique) // 3))
    return unique[cut:][:queries], unique[:cut]


def nq_sets(data_dir: Path, queries: int, tuning: int, seed: int) -> tuple[list[str], list[str]]:
    """(NQ-open's held-out fifth, a seeded sample of its other four fifths) of ``data_dir``'s NQ file."""
    if not (data_dir / NQ_FILE).is_file():
        raise ValueError(f"{data_dir / NQ_FILE} does not exist: give --data-dir (../shared/data) or --questions FILE")
    train, heldout = ([r["question"] for r in rows] for rows in nq_split(data_dir))
    heldout = list(dict.fromkeys(heldout))
    train = [q for q in dict.fromkeys(train) if q not in set(heldout)]
    return heldout[:queries], random.Random(seed).sample(train, min(tuning, len(train)))


def from_kb(kb_dir: Path, questions_file: Path | None, data_dir: Path, queries: int, tuning: int,
            seed: int) -> Vectors:
    """The knowledge base's passage vectors and the questions encoded by its query encoder (module docstring)."""
    import openbook.commands.kb as kb_commands  # its load_encoder is the one `openbook retrieve` uses
    from openbook.index import load_knowledge_base
    from openbook.models.knowledge import encoder_name

    name = encoder_name(None, kb_dir)  # reads the manifest: a wrong path fails first
    if questions_file is not None:
        evaluation, tuning_set = seeded_split(read_questions(questions_file), queries, tuning, seed)
        source = f"{questions_file} (seeded split, seed {seed})"
    else:
        evaluation, tuning_set = nq_sets(data_dir, queries, tuning, seed)
        source = f"NQ-open held-out fifth of {data_dir / NQ_FILE}; tuning: its training part (seed {seed})"
    encoder = kb_commands.load_encoder(name)
    kb = load_knowledge_base(kb_dir, expected_encoder=encoder.info(), verify="size")
    stored = getattr(kb, "embeddings", None)
    if stored is None:
        raise ValueError(f"knowledge base {kb_dir} is sharded: give one shard's folder")
    data = stored
    if stored.dtype != np.float32:  # float16 on disk: FAISS adds and searches float32
        data = np.empty(stored.shape, dtype=np.float32)
        for start in range(0, len(stored), CHUNK):
            data[start : start + CHUNK] = stored[start : start + CHUNK]
    encode = encoder.encode_queries
    info = encoder.info()
    kb.close()  # the store; the vectors stay mapped
    description = (f"knowledge base {kb_dir}: {len(data):,} passage vectors ({stored.dtype} on disk) of encoder "
                   f"{info.get('name')!r}; queries: {source}")
    extra = {"kb": str(kb_dir), "encoder": info.get("name"), "embeddings_dtype": str(stored.dtype),
             "questions": source, "tuning_queries": len(tuning_set)}
    return Vectors(data, np.asarray(encode(evaluation), dtype=np.float32),
                   np.asarray(encode(tuning_set), dtype=np.float32), "knowledge base", description,
                   bool(info.get("normalize")), extra)


# -- what `openbook kb build` would choose ------------------------------------------------------------


def kb_build_default(n: int, dim: int) -> tuple[str, str]:
    """(index kind ``openbook kb build`` chooses for ``n`` vectors of ``dim`` without ``--index``, the rule it follows)."""
    from openbook.index.kb.indexing import FLAT_MAX_COMPONENTS, resolve_index
    from openbook.presets import AUTO_INDEX

    kind, _ = resolve_index(AUTO_INDEX, {}, n, dim)
    return kind.type_name, (f"openbook/index/kb/indexing.py resolve_index: flat while rows x dim <= "
                            f"FLAT_MAX_COMPONENTS = {FLAT_MAX_COMPONENTS:,}")
