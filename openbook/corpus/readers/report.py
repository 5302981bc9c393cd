"""What a corpus read did with each file: how many of each type it read, which it did not and why."""

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class SkippedFile:
    """A file that was not read: its path, a ``reason`` (``"unsupported type"``, ``"unreadable"``,
    ``"empty"``, ``"encrypted"``, ``"too large"``, ``"corrupt"``, ``"binary"``, ...) and a one-line detail."""

    path: str
    reason: str
    detail: str

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"


class SourceReport:
    """Files read per type, files not read (each named with its reason), non-UTF-8 encodings used, and
    records with no text that were skipped (``empty_records``: WikiExtractor's redirect stubs, say).

    ``report`` is called with a one-line message for each file not read, as it happens (e.g. to warn).
    """

    def __init__(self, report: Callable[[str], None] | None = None):
        self.report = report
        self.reset()

    def reset(self) -> None:
        """Forget everything (for a fresh pass over the same sources)."""
        self.read: Counter[str] = Counter()
        self.skipped: list[SkippedFile] = []
        self.encodings: dict[str, str] = {}
        self.hidden = 0
        self.empty_records = 0

    def add_read(self, file_type: str) -> None:
        self.read[file_type] += 1

    def skip(self, path, reason: str, detail: str) -> None:
        skipped = SkippedFile(str(path), reason, detail)
        self.skipped.append(skipped)
        if self.report is not None:
            self.report(f"not read {skipped}")

    @property
    def incomplete(self) -> bool:
        """True if a file that openbook reads was not read (unreadable, corrupt, too large, ...): the read may
        have missed documents it holds, so a sync must not take their absence for a deletion."""
        return any(s.reason not in ("unsupported type", "empty") for s in self.skipped)

    def encoding(self, path, encoding: str) -> None:
        self.encodings[str(path)] = encoding

    def as_dict(self) -> dict:
        """The report as JSON-ready data (``kb build --json``)."""
        return {
            "files_read": dict(sorted(self.read.items())),
            "files_not_read": [asdict(s) for s in self.skipped],
            "encodings": self.encodings,
            "hidden_files_ignored": self.hidden,
            "empty_records_skipped": self.empty_records,
        }

    def lines(self) -> list[str]:
        """A human summary: the files read per type, then every file not read with its reason."""
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(self.read.items())) or "none"
        lines = [f"files read: {counts}"]
        for path, encoding in self.encodings.items():
            lines.append(f"  {path}: read as {encoding} text (not UTF-8)")
        if self.skipped:
            lines.append(f"files not read: {len(self.skipped)} (use --strict to stop before encoding instead)")
            lines.extend(f"  {s}" for s in self.skipped)
        if self.hidden:
            lines.append(f"hidden files ignored: {self.hidden}")
        if self.empty_records:
            lines.append(f"records with no text skipped: {self.empty_records}")
        return lines
