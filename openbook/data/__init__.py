"""Data shipped with openbook: the demo passages (see ``demo/README.md`` for contents and licences)."""

from importlib import resources
from pathlib import Path

from openbook.errors import KnowledgeBaseError

DEMO_PASSAGES = ("demo", "passages.jsonl.gz")
DEFAULT_RUN = "default"  # the shipped fine-tuned default: run.json + checkpoint/model.safetensors (LoRA adapters)


def default_run_path() -> Path | None:
    """The folder of the shipped fine-tuned default model (``scripts/train_default.sh`` makes it), or None
    if this installation has none."""
    path = Path(str(resources.files(__name__).joinpath(DEFAULT_RUN)))
    return path if (path / "run.json").is_file() else None


def demo_passages_path() -> Path:
    """Path of the shipped demo corpus ``demo/passages.jsonl.gz`` ({id, title, text} JSON Lines, gzip).

    Raises KnowledgeBaseError if the file is not installed (e.g. package data left out of a build).
    """
    resource = resources.files(__name__).joinpath(*DEMO_PASSAGES)
    path = Path(str(resource))
    if not path.is_file():
        raise KnowledgeBaseError(
            f"demo passages file {path} is missing: openbook was installed without its package data; "
            f"reinstall openbook"
        )
    return path
