"""RAG proper: the marginalisation math, decoding, and the model that ties retriever and generator."""

from openbook.rag.model import RAG, Answer, Retrieval, RetrievedPassage

__all__ = ["RAG", "Answer", "Retrieval", "RetrievedPassage"]
