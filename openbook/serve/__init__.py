"""``openbook serve``: RAG as an HTTP service (FastAPI + uvicorn).

:func:`~openbook.serve.app.create_app` builds the app from a :class:`~openbook.serve.config.ServeConfig` (and,
in tests and benchmarks, a loaded RAG model). Modules: :mod:`~openbook.serve.schemas` (the API's pydantic
models), :mod:`~openbook.serve.routes` (the endpoints), :mod:`~openbook.serve.worker` (the model thread and
its dynamic batches), :mod:`~openbook.serve.books` (the knowledge-base versions in use, swaps),
:mod:`~openbook.serve.errors` (JSON errors), :mod:`~openbook.serve.guards` (body limit, header deadline, drain,
socket) and :mod:`~openbook.serve.metrics` (Prometheus). The top layer:
nothing below imports it.
"""

from openbook.serve.config import ServeConfig

__all__ = ["ServeConfig", "create_app"]


def __getattr__(name: str):
    if name == "create_app":  # imported on first use: FastAPI is not needed to read ServeConfig's defaults
        from openbook.serve.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
