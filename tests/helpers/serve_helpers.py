"""Shared helpers of the serve tests: a tiny RAG over tiny knowledge bases, and an in-process app driven
through httpx's ASGI transport with the app's lifespan running (the worker thread starts and stops)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

from openbook.corpus import Passage
from openbook.models.generators import Seq2SeqGenerator
from openbook.rag import RAG
from openbook.rag.assemble import build_knowledge_base
from openbook.serve import ServeConfig, create_app
from tiny import PASSAGES, bart_tokenizer, tiny_bart, tiny_encoder

OTHER = [Passage(f"q{i}", f"Other {i}", text) for i, text in enumerate(
    ["the king of france", "the queen wrote a novel", "music in europe", "the war of the year"])]
QUESTIONS = ["who wrote the sun rises", "capital of france", "largest ocean", "the first nobel prize",
             "president of peru", "largest mountain"]


def tiny_rag(root: Path, model: str = "rag-token"):
    """A tiny RAG over knowledge base ``root/kbs/main`` (``root/kbs/other`` is a second one to swap to),
    and its encoder."""
    encoder = tiny_encoder()
    kbs = root / "kbs"
    kb = build_knowledge_base(PASSAGES, encoder, kbs / "main", progress=False)
    build_knowledge_base(OTHER, encoder, kbs / "other", progress=False)
    tok = bart_tokenizer()
    generator = Seq2SeqGenerator(tiny_bart(vocab_size=len(tok), seed=3), tok)
    return RAG(encoder, generator, kb, model=model, k=3).eval(), encoder


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def saved_tiny_models(rag, encoder, root: Path) -> tuple[Path, Path, Path]:
    """``rag``'s generator and ``encoder`` saved as model folders, and a knowledge base of PASSAGES built with the
    saved encoder: what an `openbook serve` subprocess loads by path. Returns (generator, encoder, kb) folders."""
    from openbook.models import load_encoder

    gen_dir, enc_dir, kb_dir = root / "gen", root / "enc", root / "kb"
    rag.generator.model.save_pretrained(gen_dir)
    rag.generator.tokenizer.save_pretrained(gen_dir)
    encoder.model.save_pretrained(enc_dir)
    encoder.tokenizer.save_pretrained(enc_dir)
    build_knowledge_base(PASSAGES, load_encoder(str(enc_dir)), kb_dir, progress=False)
    return gen_dir, enc_dir, kb_dir


def subprocess_env() -> tuple[str, dict]:
    """The repository folder and an environment whose PYTHONPATH imports this checkout's openbook."""
    repo = str(Path(__file__).resolve().parents[2])
    return repo, dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))


def wait_ready(process: subprocess.Popen, base: str, deadline: float) -> None:
    """Wait until the server ``process`` at ``base`` answers ``/readyz`` with 200 (it must not exit first)."""
    while True:
        assert process.poll() is None, process.communicate()[1]
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not get ready"
        time.sleep(0.2)


def config(root: Path, encoder, **overrides) -> ServeConfig:
    settings = {"kb_root": str(root / "kbs"), "admin_token": "secret", "passage_encoder": encoder,
                "max_wait_ms": 20.0, **overrides}
    return ServeConfig(**settings)


@contextlib.asynccontextmanager
async def client(app):
    """An httpx client of ``app`` in this event loop, with the app's startup and shutdown run."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as http:
            yield http


def run(coroutine):
    return asyncio.run(coroutine)


def sse_events(text: str) -> list[tuple[str, dict]]:
    """``(event, data)`` of each server-sent event in a response body."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


ADMIN = {"Authorization": "Bearer secret"}
__all__ = ["ADMIN", "OTHER", "PASSAGES", "QUESTIONS", "client", "config", "create_app", "run", "sse_events", "tiny_rag"]
