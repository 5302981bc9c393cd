"""RAG proper: the marginalisation math, decoding, and the model that ties retriever and generator."""

from openbook.rag.model import RAG, Answer, RetrievedPassage, Retrieval

__all__ = ["RAG", "Answer", "RetrievedPassage", "Retrieval"]
