"""RAG proper: the marginalisation math, decoding, and the model that ties retriever and generator.

:func:`load_model` (:mod:`openbook.rag.assemble`) is the one loader; ``RAG.load`` builds with it (handed in
here, since :mod:`openbook.rag.model` sits below the loader and does not import it). :func:`build_kb`
(:mod:`openbook.models.knowledge`) makes a knowledge base from a folder or from texts in one call."""

from openbook.models.knowledge import build_kb
from openbook.rag.answer import Answer, RetrievedPassage
from openbook.rag.assemble import load_model
from openbook.rag.model import RAG, Retrieval

RAG.loader = staticmethod(load_model)

__all__ = ["RAG", "Answer", "Retrieval", "RetrievedPassage", "build_kb", "load_model"]
