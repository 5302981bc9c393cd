"""RAG proper: the marginalisation math, decoding, and the model that ties retriever and generator.

:func:`load_model` (:mod:`openbook.rag.assemble`) is the one loader; ``RAG.load`` builds with it (handed in
here, since :mod:`openbook.rag.model` sits below the loader and does not import it)."""

from openbook.rag.answer import Answer, RetrievedPassage
from openbook.rag.assemble import load_model
from openbook.rag.model import RAG, Retrieval

RAG.loader = staticmethod(load_model)

__all__ = ["RAG", "Answer", "Retrieval", "RetrievedPassage", "load_model"]
