"""A knowledge base: passages z, their document vectors d(z) and a dense index, in one directory.

Layout of a knowledge-base directory (``FORMAT_VERSION`` 2)::

    passages.sqlite   the passage store: row (= vector id), id, title, text, added/deleted version,
                      metadata, each row's document and its content hash (openbook.index.store_documents),
                      and an index of the metadata values for filters (openbook.index.store_meta)
    embeddings.npy    (num_rows, dim) float32 or float16 document vectors, row i = store row i
    index.faiss       the dense index over all rows (after edits: index.v<N>.faiss, named in the manifest)
    manifest.json     what is there, checksums, and the version history (written last, atomically)

Nothing is held in memory in full: the store answers ``get(rows)`` from disk, the embeddings are a
read-only memory map, and the index is memory-mapped where FAISS allows (``load(mmap=True)``).

**Manifest.** ``format_version``; ``encoder`` (the dict the builder passed, e.g. name, pooling, normalize,
dim and ``weights_sha256``, a fingerprint of the encoder's weights; the keys present on both sides are
compared with the query encoder on load); ``dim`` and ``dtype`` of the vectors; ``index`` (``type``,
``params``, ``file``) and ``index_type``; ``num_rows`` (rows in the store, embeddings and index);
``num_passages`` (passages visible at the current version); ``files`` (size and sha256 of each data
file; for ``embeddings.npy`` one sha256 per appended segment of rows, so an edit hashes only what it
wrote); ``current_version``, ``latest_version`` and ``versions`` (number, timestamp, description, row
and passage counts of each); ``created_at``/``updated_at``; ``build`` (options and skipped records).

**Versions and edits.** The build is version 1. Every edit (:meth:`KnowledgeBase.add`, ``update``,
``delete``) creates version latest + 1 without re-encoding anything else: new passages are appended to
the store, the embeddings and the index; deleted (and updated) passages keep their rows, marked
``deleted_version`` in the store. A row is visible at version v if it was added at or before v and not
deleted as of v; searching at version v passes the invisible rows to the index as ``exclude``. So
:meth:`KnowledgeBase.use_version` (``openbook kb use``) can go back to any earlier version and forward
again, and ``KnowledgeBase.load(path, version=v)`` opens one without changing the current version.
Edits apply on top of the latest version (and make it current).

**Crash safety.** An edit first records ``pending_edit`` in the manifest, then changes the store (SQLite
transactions), appends embeddings, writes the new index to a new file, and finally writes the manifest
(atomic rename): until then the previous manifest, index file and every row it knows are untouched,
and rows and deletion marks from the unfinished edit are invisible because they carry a version the
manifest does not have. The next edit (or a failed one, at once) undoes them first.

**Building** streams: passages go to the store and vectors to ``embeddings.npy`` in batches, so memory
does not grow with the corpus (except the index itself, as FAISS holds it). With ``resume=True`` (the
``openbook kb build`` command) the build state is kept in ``<DIR>.partial/``, with a progress file
written atomically after each batch; running the same build again continues after the last completed
batch and produces the same bytes as an uninterrupted build. Only the final rename publishes the
knowledge base, so an interrupted build never leaves a half-written one at ``DIR``. A build replaces an
existing knowledge base only when asked (``replace=True``, ``kb build --force``), holding its lock (the
one edits take) until the replacement, and never a folder that also holds other files.

**Leftovers.** A killed build or edit may leave temporary names of :mod:`openbook.atomic` behind
(``.manifest.json.tmp-*`` inside, ``.<DIR>.building-*`` or ``.<DIR>.old-*`` beside the folder): the next
build or edit removes them once it holds the lock. A build writes its temporary files beside its stage,
so none is ever published.

**Modules.** :mod:`~openbook.index.kb.layout` (file names, manifest, checksums, encoder identity),
:mod:`~openbook.index.kb.folder` (the lock, what a build may replace, leftovers of killed processes),
:mod:`~openbook.index.kb.indexing` (creating, loading and searching the dense index),
:mod:`~openbook.index.kb.append` (encoding and appending new passages), :mod:`~openbook.index.kb.build`
(resumable builds), :mod:`~openbook.index.kb.edit` (crash-safe edits and versions),
:mod:`~openbook.index.kb.documents` (documents: list, delete, sync with a folder) and
:mod:`~openbook.index.kb.api` (the :class:`KnowledgeBase` object).

Integrity checks on load (``verify``): ``"auto"`` (default) checks that every file is present with its
recorded size (which catches truncation) and verifies the sha256 of files (and embedding segments) up
to ``CHECKSUM_AUTO_MAX_BYTES``; ``"full"`` verifies every checksum, ``"size"`` none.
"""

from openbook.index.kb.api import KnowledgeBase
from openbook.index.kb.documents import delete_document, list_documents, sync_documents
from openbook.index.kb.edit import add_passages, delete_passages, disk_usage, update_passages, use_version
from openbook.index.kb.folder import partial_dir
from openbook.index.kb.indexing import parse_index_params
from openbook.index.kb.layout import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    check_encoder_matches,
    describe_encoder,
    read_manifest,
    stored_format_version,
)

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_FILE",
    "KnowledgeBase",
    "add_passages",
    "check_encoder_matches",
    "delete_document",
    "delete_passages",
    "describe_encoder",
    "disk_usage",
    "list_documents",
    "parse_index_params",
    "partial_dir",
    "read_manifest",
    "stored_format_version",
    "sync_documents",
    "update_passages",
    "use_version",
]
