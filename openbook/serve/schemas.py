"""The HTTP API's requests and responses as pydantic models, so that ``/openapi.json`` and ``/docs``
describe exactly what the server takes and gives (the contract: docs/guide/serving.md, ``openbook serve --help``).

The caps here (:data:`MAX_BEAMS`, :data:`MAX_NEW_TOKENS`, :data:`MAX_QUESTIONS`, :data:`MAX_ROWS`,
:data:`MAX_EDIT`; k's is :data:`openbook.errors.MAX_K`, checked by :func:`openbook.errors.check_k` as everywhere)
bound the work one request may ask for; the longest question is a server flag
(``--max-question-chars``), checked by the app. :data:`MAX_ROWS` also bounds what the worker gathers into one
batch: the other caps alone would let one request decode 32 x 100 x 8 = 25,600 sequences at once; decoding's memory
grows with them (``bench/ask_memory.py``: the default model's peak at 256).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from openbook.errors import MAX_K, check_k, check_text
from openbook.presets import DECODINGS, INTERACTIVE, MODELS, RETRIEVERS

MAX_BEAMS = 8
MAX_NEW_TOKENS = 64  # short answers; `openbook ask` goes further offline
MAX_QUESTIONS = 32  # questions in one request
MAX_ROWS = 256  # sequences decoded at once, questions x k x beams (one request, and one server batch)
MAX_EDIT = 256  # passages (or ids) in one admin edit
MAX_TEXT = 20_000  # characters of one passage's text or title

Model = Literal[MODELS]  # the choice lists of openbook.presets
Decoding = Literal[DECODINGS]
RetrieverName = Literal[RETRIEVERS]


class Strict(BaseModel):
    """Unknown fields are refused (a typo such as ``"beam"`` must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid")


Questions = str | list[str]


def _valid_text(value: Any, info: ValidationInfo) -> Any:
    """Text a tokenizer can take (:func:`openbook.errors.check_text`): refused where it enters, so that one bad
    request fails alone (422 naming the field) instead of the model batch it would have joined."""
    return check_text(value, info.field_name or "the text") if isinstance(value, str) else value


Text = Annotated[str, BeforeValidator(_valid_text)]


def check_sequences(questions: int, k: int, beams: int) -> None:
    """Refuse (``ValueError``) a request that would decode more than :data:`MAX_ROWS` sequences at once."""
    if questions * k * beams > MAX_ROWS:
        raise ValueError(f"questions x k x beams = {questions} x {k} x {beams} = {questions * k * beams} sequences, "
                         f"above the cap of {MAX_ROWS}: ask fewer questions at once, or lower k or beams")


def _check_k(value: int | None) -> int | None:
    return None if value is None else check_k(value)  # an InputError is a ValueError: a 422 naming k


#: What the API documents of k (``/openapi.json``); :func:`_check_k` enforces it.
K_BOUNDS = {"minimum": 1, "maximum": MAX_K}


def _check_questions(value: Questions) -> Questions:
    items = [value] if isinstance(value, str) else value
    if not items:
        raise ValueError("give at least one question")
    if len(items) > MAX_QUESTIONS:
        raise ValueError(f"at most {MAX_QUESTIONS} questions per request, got {len(items)}")
    for i, q in enumerate(items):
        where = "the question" if isinstance(value, str) else f"question {i + 1}"
        check_text(q, where)
        if not q.strip():
            raise ValueError(f"{where} is empty")
    return value


#: the JSON form of openbook.index.filters, parsed (and refused with a 422 naming e.g. filter.modified.gte) by the routes
FILTER_DESCRIPTION = (
    "keep only the passages whose metadata matches, all conditions ANDed: FIELD: VALUE (equal) or FIELD: "
    "{OPERATOR: VALUE} with operators eq, prefix (text starting with it), gte and lte (at least / at most: numbers "
    "as numbers, ISO dates as text); e.g. {\"source\": {\"prefix\": \"handbook/\"}, \"modified\": {\"gte\": "
    "\"2026-01-01\"}}. The top k is exact among the matching passages (null: no filter)")


class AskRequest(Strict):
    question: Questions = Field(description=f"one question, or a list of at most {MAX_QUESTIONS}")
    k: int | None = Field(None, json_schema_extra=K_BOUNDS, description="passages retrieved per question (null: "
                          "the server's k, `openbook serve --k`, else the model's)")
    model: Model | None = Field(None, description="rag-sequence or rag-token (null: the server's model)")
    # the defaults of `openbook ask` and RAG.ask: the interactive preset (openbook.presets.INTERACTIVE)
    decoding: Decoding = Field(INTERACTIVE.decoding, description="RAG-Sequence decoding: thorough, fast or lazy "
                               "(fast's answer from only the passages that decide it; no posterior for the others)")
    beams: int = Field(INTERACTIVE.num_beams, ge=1, le=MAX_BEAMS, description="beam size; 1 is greedy search")
    max_new_tokens: int = Field(INTERACTIVE.max_new_tokens, ge=1, le=MAX_NEW_TOKENS,
                                description="longest answer, in generator tokens")
    retriever: RetrieverName = Field("dense", description="dense (MIPS), bm25 or hybrid")
    filter: dict[str, Any] | None = Field(None, description=FILTER_DESCRIPTION)
    stream: bool = Field(False, description="server-sent events: `token` per generated token (RAG-Token, "
                         "greedy), then `done` with the response object (or `error`)")

    _questions = field_validator("question")(_check_questions)
    _k = field_validator("k")(_check_k)


class RetrieveRequest(Strict):
    question: Questions = Field(description=f"one question, or a list of at most {MAX_QUESTIONS}")
    k: int | None = Field(None, json_schema_extra=K_BOUNDS, description="passages per question (null: the server's k)")
    retriever: RetrieverName = "dense"
    filter: dict[str, Any] | None = Field(None, description=FILTER_DESCRIPTION)

    _questions = field_validator("question")(_check_questions)
    _k = field_validator("k")(_check_k)


class PassageOut(BaseModel):
    id: str
    title: str
    text: str
    score: float = Field(description="the retriever's score (d(z)^T q(x) for dense)")
    prob: float = Field(description="p(z|x) over the top k")
    posterior: float | None = Field(None, description="p(z|x,y) given the answer")
    meta: dict[str, str | bool | int | float] = Field(
        default_factory=dict, description="the passage's metadata (source, type, page, section, modified and the "
        "fields kept from the input); {} when it has none")


class AnswerOut(BaseModel):
    question: str
    answer: str
    model: Model
    tokens: list[str] = Field(description="the answer's tokens as the tokenizer writes them (e.g. 'ĠParis')")
    token_texts: list[str] = Field(description="the text each token adds to the answer; they join to its decoded text")
    passages: list[PassageOut]
    token_posteriors: list[list[float]] | None = Field(
        None, description="RAG-Token: p(z|x,y_<=t) per answer token, per passage (the paper's Figure 2)")
    truncated: bool = Field(description="the answer hit max_new_tokens and was cut back to a whole word")


class KBRef(BaseModel):
    name: str
    version: int


class Timings(BaseModel):
    queue_ms: float
    compute_ms: float
    total_ms: float


class AskResponse(BaseModel):
    answers: list[AnswerOut]
    kb: KBRef = Field(description="the knowledge-base version every answer came from")
    timings: Timings
    batch_size: int = Field(description="questions answered in the same model batch")


class TokenEvent(BaseModel):
    index: int
    token: str
    text: str = Field(description="the answer so far")


class RetrieveResult(BaseModel):
    question: str
    passages: list[PassageOut]


class RetrieveResponse(BaseModel):
    results: list[RetrieveResult]
    kb: KBRef


class KBInfo(BaseModel):
    name: str
    path: str
    version: int
    latest_version: int
    num_passages: int
    encoder: dict[str, Any]
    versions: list[dict[str, Any]]
    swappable: list[str] = Field(description="knowledge bases under the server's --kb-root")


class NewPassage(Strict):
    id: Text | None = Field(None, min_length=1, max_length=200)
    title: Text = Field("", max_length=MAX_TEXT)
    text: Text = Field(min_length=1, max_length=MAX_TEXT)


class ChangedPassage(Strict):
    id: Text = Field(min_length=1, max_length=200)
    title: Text | None = Field(None, max_length=MAX_TEXT)
    text: Text = Field(min_length=1, max_length=MAX_TEXT)


class AddRequest(Strict):
    passages: list[NewPassage] = Field(min_length=1, max_length=MAX_EDIT)


class UpdateRequest(Strict):
    passages: list[ChangedPassage] = Field(min_length=1, max_length=MAX_EDIT)


class DeleteRequest(Strict):
    ids: list[Text] = Field(min_length=1, max_length=MAX_EDIT)


class DeleteDocumentRequest(Strict):
    document: str = Field(min_length=1, max_length=4096, description="a document id, as /v1/kb/documents lists it")


class DocumentEntry(BaseModel):
    document: str | None = Field(description="the document id (its path in the folder built from), or null for "
                                             "passages of no document")
    sha256: str | None = Field(description="the content hash of the document when it was added")
    passages: list[str] = Field(description="its passage ids")


class DocumentsResponse(BaseModel):
    kb: KBRef
    documents: list[DocumentEntry]


class EditResponse(BaseModel):
    kb: KBRef
    changed: int
    replayed: bool = Field(False, description="a retry of an edit already applied (same Idempotency-Key): "
                           "answered with the version that edit wrote, nothing applied again")


class SwapRequest(Strict):
    name: Text = Field(min_length=1, max_length=255, description="a knowledge-base folder under --kb-root")
    version: int | None = Field(None, ge=1, description="a version of it (null: its current version)")


class SwapResponse(BaseModel):
    kb: KBRef


class ErrorDetail(BaseModel):
    field: str | None = Field(description="the request field at fault (dotted), or null")
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: str
