"""The HTTP API of `openbook serve` in process, on a tiny RAG: ask (JSON and streamed), retrieve, kb,
admin edits and swaps with a bearer token, health, readiness, metrics, OpenAPI, bad input."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import torch

from openbook.serve import ServeConfig
from serve_helpers import (
    ADMIN,
    PASSAGES,
    client,
    config,
    create_app,
    free_port,
    run,
    saved_tiny_models,
    sse_events,
    subprocess_env,
    tiny_rag,
    wait_ready,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    rag, encoder = tiny_rag(root)
    return root, rag, encoder


def test_ask_answers_with_provenance_and_the_version(tiny):
    root, rag, encoder = tiny

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            r = await http.post("/v1/ask", json={"question": "capital of france", "k": 3, "max_new_tokens": 4})
            assert r.status_code == 200, r.text
            body = r.json()
            (answer,) = body["answers"]
            direct = rag.ask(["capital of france"], k=3, num_beams=1, decoding="fast", max_new_tokens=4)[0]
            assert answer["answer"] == direct.answer and answer["model"] == "rag-token"
            assert [p["id"] for p in answer["passages"]] == [p.id for p in direct.passages]
            assert len(answer["token_posteriors"]) == len(answer["tokens"]) == len(direct.tokens)
            assert answer["token_texts"] == direct.token_texts and len(direct.token_texts) == len(direct.tokens)
            assert body["kb"] == {"name": "main", "version": 1} and body["batch_size"] == 1
            assert set(body["timings"]) == {"queue_ms", "compute_ms", "total_ms"}
            r = await http.post("/v1/ask", json={"question": ["largest ocean", "capital of france"],
                                                 "model": "rag-sequence", "decoding": "thorough", "beams": 2})
            assert r.status_code == 200, r.text
            answers = r.json()["answers"]
            assert [a["model"] for a in answers] == ["rag-sequence"] * 2 and answers[0]["token_posteriors"] is None
            assert all(p["posterior"] is not None for p in answers[0]["passages"])
            fast, lazy = [(await http.post("/v1/ask", json={"question": ["largest ocean", "capital of france"],
                                                            "model": "rag-sequence", "decoding": decoding})).json()
                          for decoding in ("fast", "lazy")]
            assert [a["answer"] for a in lazy["answers"]] == [a["answer"] for a in fast["answers"]]
            assert all(a["passages"][0]["posterior"] is not None for a in lazy["answers"])  # the top one is read

    run(go())


def test_on_step_streams_the_greedy_tokens_of_rag_token(tiny):
    """RAG.ask's per-step callback sees exactly the tokens of the final answer, one step at a time."""
    _, rag, _ = tiny
    seen = []
    answers = rag.ask(["capital of france", "largest ocean"], k=3, num_beams=1, max_new_tokens=5,
                      on_step=lambda position, tokens: seen.append((position, tokens.clone())))
    assert [position for position, _ in seen] == list(range(len(seen)))
    steps = torch.stack([tokens for _, tokens in seen], dim=1)  # (B, steps)
    tok = rag.generator.tokenizer
    for b, answer in enumerate(answers):
        assert tok.convert_ids_to_tokens(steps[b, :len(answer.tokens)].tolist()) == answer.tokens


def test_stream_sends_token_events_then_done(tiny):
    root, rag, encoder = tiny

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            r = await http.post("/v1/ask", json={"question": "who wrote the sun rises", "max_new_tokens": 6,
                                                 "stream": True})
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = sse_events(r.text)
            names = [name for name, _ in events]
            assert names[-1] == "done" and set(names[:-1]) <= {"token"}
            done = events[-1][1]
            answer = done["answers"][0]
            tokens = [data for name, data in events if name == "token"]
            special = set(rag.generator.tokenizer.all_special_tokens)
            assert [t["token"] for t in tokens] == [t for t in answer["tokens"] if t not in special]
            if tokens:
                assert tokens[-1]["text"] == rag.generator.tokenizer.convert_tokens_to_string(
                    [t["token"] for t in tokens]).strip()
            # RAG-Sequence knows its answer only at the end: no token events, never fake ones
            r = await http.post("/v1/ask", json={"question": "largest ocean", "model": "rag-sequence", "stream": True})
            assert [name for name, _ in sse_events(r.text)] == ["done"]

    run(go())


def test_retrieve_and_kb_info(tiny):
    root, rag, encoder = tiny

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            r = await http.post("/v1/retrieve", json={"question": ["capital of france"], "k": 2})
            assert r.status_code == 200, r.text
            (result,) = r.json()["results"]
            direct = rag.retrieve(["capital of france"], k=2)
            assert [p["id"] for p in result["passages"]] == [p.id for p in direct.passages[0]]
            assert sum(p["prob"] for p in result["passages"]) == pytest.approx(1.0, abs=1e-6)
            info = (await http.get("/v1/kb")).json()
            assert info["name"] == "main" and info["num_passages"] == len(PASSAGES)
            assert info["swappable"] == ["main", "other"] and info["versions"][0]["version"] == 1

    run(go())


def test_admin_needs_the_token_and_a_read_only_server_refuses(tiny):
    root, rag, encoder = tiny
    body = {"passages": [{"title": "New", "text": "a new fact about music"}]}

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            r = await http.post("/v1/kb/passages", json=body)
            assert r.status_code == 401 and r.json()["error"]["message"]
            r = await http.post("/v1/kb/passages", json=body, headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401
        async with client(create_app(config(root, encoder, admin_token=None), rag=rag)) as http:
            r = await http.post("/v1/kb/swap", json={"name": "other"}, headers=ADMIN)
            assert r.status_code == 403 and "read-only" in r.json()["error"]["message"]

    run(go())


def test_edits_make_new_versions_and_swaps_stay_under_the_root(tmp_path):
    rag, encoder = tiny_rag(tmp_path)

    async def go():
        async with client(create_app(config(tmp_path, encoder), rag=rag)) as http:
            r = await http.post("/v1/kb/passages", headers=ADMIN,
                                json={"passages": [{"id": "n1", "title": "Music", "text": "music of the ocean"}]})
            assert r.status_code == 200, r.text
            assert r.json() == {"kb": {"name": "main", "version": 2}, "changed": 1, "replayed": False}
            r = await http.put("/v1/kb/passages", headers=ADMIN,
                               json={"passages": [{"id": "n1", "text": "music of the mountain"}]})
            assert r.json()["kb"]["version"] == 3
            r = await http.request("DELETE", "/v1/kb/passages", headers=ADMIN, json={"ids": ["n1"]})
            assert r.json() == {"kb": {"name": "main", "version": 4}, "changed": 1, "replayed": False}
            r = await http.request("DELETE", "/v1/kb/passages", headers=ADMIN, json={"ids": ["nope"]})
            assert r.status_code == 422 and "nope" in r.json()["error"]["message"]
            for bad in ["../kbs/other", "..", "/etc", "other/../main", "missing"]:
                r = await http.post("/v1/kb/swap", headers=ADMIN, json={"name": bad})
                assert r.status_code in (404, 422), (bad, r.text)
            r = await http.post("/v1/kb/swap", headers=ADMIN, json={"name": "other"})
            assert r.json() == {"kb": {"name": "other", "version": 1}}
            r = await http.post("/v1/retrieve", json={"question": "the king", "k": 2})
            assert {p["id"] for p in r.json()["results"][0]["passages"]} <= {"q0", "q1", "q2", "q3"}
            r = await http.post("/v1/kb/swap", headers=ADMIN, json={"name": "main", "version": 2})
            assert r.json() == {"kb": {"name": "main", "version": 2}}
            assert (await http.get("/v1/kb")).json()["num_passages"] == len(PASSAGES) + 1

    run(go())


def test_swap_refuses_a_symlink_out_of_the_root(tmp_path):
    rag, encoder = tiny_rag(tmp_path)
    import shutil

    outside = tmp_path / "outside"
    shutil.copytree(tmp_path / "kbs" / "other", outside)  # a real knowledge base, outside the root
    (tmp_path / "kbs" / "escape").symlink_to(outside)
    (tmp_path / "kbs" / "inside").symlink_to(tmp_path / "kbs" / "other")  # leads back into the root: fine

    async def go():
        async with client(create_app(config(tmp_path, encoder), rag=rag)) as http:
            r = await http.post("/v1/kb/swap", headers=ADMIN, json={"name": "escape"})
            assert r.status_code == 422, r.text
            assert "escape" not in (await http.get("/v1/kb")).json()["swappable"]
            r = await http.post("/v1/kb/swap", headers=ADMIN, json={"name": "inside"})
            assert r.status_code == 200, r.text

    run(go())


@pytest.mark.parametrize("payload,status,field", [
    (b"{not json", 400, None),
    ({"question": ""}, 422, "question"),
    ({"question": "   "}, 422, "question"),
    ({"question": ["ok", ""]}, 422, "question"),
    ({"question": "x" * 101}, 422, "question"),
    ({"question": ["ok", "x" * 101]}, 422, "question.1"),
    ({"question": 3}, 422, "question"),
    ({"question": "q", "k": 0}, 422, "k"),
    ({"question": "q", "k": 101}, 422, "k"),
    ({"question": "q", "k": "five"}, 422, "k"),
    ({"question": "q", "beams": 9}, 422, "beams"),
    ({"question": "q", "max_new_tokens": 65}, 422, "max_new_tokens"),
    ({"question": ["q"] * 33}, 422, "question"),
    ({"question": ["q"] * 4, "k": 20, "beams": 4}, 422, "beams"),  # 320 sequences: above MAX_ROWS (256)
    ({"question": "q", "model": "gpt"}, 422, "model"),
    ({"question": "q", "retriever": "google"}, 422, "retriever"),
    ({"question": "q", "decoding": "slow"}, 422, "decoding"),
    ({"question": "q", "beam": 2}, 422, "beam"),
    ([1, 2], 422, None),
    ({}, 422, "question"),
])
def test_bad_input_is_a_4xx_naming_the_field(tiny, payload, status, field):
    root, rag, encoder = tiny

    async def go():
        async with client(create_app(config(root, encoder, max_question_chars=100), rag=rag)) as http:
            if isinstance(payload, bytes):
                r = await http.post("/v1/ask", content=payload, headers={"Content-Type": "application/json"})
            else:
                r = await http.post("/v1/ask", json=payload)
            assert r.status_code == status, r.text
            error = r.json()["error"]
            assert error["field"] == field and "\n" not in error["message"] and "Traceback" not in error["message"]

    run(go())


def test_a_request_without_k_gets_the_servers_k(tiny):
    """`openbook serve --k N` (the model's k) is what a request that names no k gets; a request's own k wins."""
    root, rag, encoder = tiny
    previous, rag.k = rag.k, 2
    try:
        async def go():
            async with client(create_app(config(root, encoder), rag=rag)) as http:
                asked = await http.post("/v1/ask", json={"question": "capital of france", "max_new_tokens": 2})
                retrieved = await http.post("/v1/retrieve", json={"question": "capital of france"})
                own = await http.post("/v1/retrieve", json={"question": "capital of france", "k": 3})
            return asked.json(), retrieved.json(), own.json()

        asked, retrieved, own = run(go())
    finally:
        rag.k = previous
    assert len(asked["answers"][0]["passages"]) == 2
    assert len(retrieved["results"][0]["passages"]) == 2
    assert len(own["results"][0]["passages"]) == 3


def test_health_readiness_metrics_and_openapi(tiny):
    root, rag, encoder = tiny

    async def go():
        loading = []

        def load():
            loading.append(1)
            import time

            time.sleep(0.3)
            return rag

        app = create_app(ServeConfig(load=load, passage_encoder=encoder))
        async with client(app) as http:
            assert (await http.get("/healthz")).status_code == 200
            r = await http.get("/readyz")
            assert r.status_code == 503 and r.headers["retry-after"]
            assert (await http.post("/v1/ask", json={"question": "q"})).status_code == 503
            for _ in range(100):
                if (await http.get("/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
            assert (await http.get("/readyz")).status_code == 200
            assert (await http.post("/v1/ask", json={"question": "capital of france"})).status_code == 200
            await http.post("/v1/ask", json={"question": ""})
            metrics = (await http.get("/metrics")).text
            assert 'openbook_requests_total{endpoint="/v1/ask",method="POST",status="200"} 1.0' in metrics
            assert 'openbook_errors_total{endpoint="/v1/ask",status="422"} 1.0' in metrics
            assert "openbook_batch_size_bucket" in metrics and "openbook_queue_depth" in metrics
            assert "openbook_request_seconds_bucket" in metrics
            schema = (await http.get("/openapi.json")).json()
            assert {"/v1/ask", "/v1/retrieve", "/v1/kb", "/v1/kb/passages", "/v1/kb/swap"} <= set(schema["paths"])
            assert "AskRequest" in schema["components"]["schemas"] and (await http.get("/docs")).status_code == 200
            assert (await http.get("/nowhere")).json()["error"]["message"]
        assert loading == [1]

    run(go())


def test_cors_is_off_unless_an_origin_is_given(tiny):
    root, rag, encoder = tiny
    headers = {"Origin": "http://elsewhere.example", "Access-Control-Request-Method": "POST"}

    async def go():
        async with client(create_app(config(root, encoder), rag=rag)) as http:
            r = await http.options("/v1/ask", headers=headers)
            assert "access-control-allow-origin" not in r.headers
        async with client(create_app(config(root, encoder, cors_origins=["http://elsewhere.example"]), rag=rag)) as http:
            r = await http.options("/v1/ask", headers=headers)
            assert r.headers["access-control-allow-origin"] == "http://elsewhere.example"

    run(go())


def test_openbook_serve_drains_in_flight_requests_on_sigterm(tiny, tmp_path):
    """A real `openbook serve` on a tiny model saved to disk: ready, answers, and on SIGTERM finishes the
    request in flight (held in the batch queue by --max-wait-ms) before exiting cleanly."""
    import signal
    import subprocess
    import sys
    import threading
    import time

    import httpx

    _, rag, encoder = tiny
    gen_dir, enc_dir, kb_dir = saved_tiny_models(rag, encoder, tmp_path)
    port = free_port()
    repo, env = subprocess_env()
    command = [sys.executable, "-m", "openbook", "serve", "--port", str(port), "--generator", str(gen_dir),
               "--encoder", str(enc_dir), "--kb", str(kb_dir), "--untrained", "--dtype", "float32",
               "--max-wait-ms", "5000", "--drain-s", "30"]
    process = subprocess.Popen(command, env=env, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # seconds on a quiet machine; generous for a busy one
        wait_ready(process, base, deadline)
        answers = []
        asking = threading.Thread(target=lambda: answers.append(
            httpx.post(f"{base}/v1/ask", json={"question": "capital of france", "max_new_tokens": 3}, timeout=60)))
        asking.start()
        while "openbook_queue_depth 1.0" not in httpx.get(f"{base}/metrics", timeout=10).text:
            assert asking.is_alive() and time.monotonic() < deadline, answers
            time.sleep(0.05)
        # the request now waits in the worker's queue for --max-wait-ms
        process.send_signal(signal.SIGTERM)
        asking.join(60)
        assert answers and answers[0].status_code == 200, answers and answers[0].text
        assert answers[0].json()["answers"][0]["question"] == "capital of france"
        # uvicorn re-raises the signal once it has shut down, so the exit status says "ended by SIGTERM"
        assert process.wait(60) in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
        _, err = process.communicate()
    assert "Application shutdown complete" in err and "Traceback" not in err


def test_serve_command_refuses_bad_flags_in_one_line(tmp_path, capsys):
    from openbook.cli import main

    assert main(["serve", "--kb-root", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("openbook: error: --kb-root") and err.count("\n") == 1
    assert main(["serve", "--port", "70000"]) == 2


def test_serve_exits_with_the_loaders_one_line_error(tmp_path):
    """A model that cannot load stops the server (instead of a server that is never ready), with the loader's
    one-line error. A real `openbook serve` process: uvicorn run in-process would bind its log handlers to pytest's
    captured stderr, which is closed after the test."""
    missing = tmp_path / "nowhere"
    proc = subprocess.run([sys.executable, "-m", "openbook", "serve", "--port", str(free_port()), "--generator",
                           str(missing)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"openbook: error: model folder '{missing}' does not exist"
    assert "Traceback" not in proc.stderr


def test_a_model_thread_host_loads_and_computes_in_the_thread_that_runs_it(tiny):
    """`openbook serve` hands the model's loading and the worker's loop to its main thread (ServeConfig.host, a
    ModelThread), where PyTorch computes faster (bench/thread_speed.py): both run there, the answers are those of
    rag.ask, and shutting the app down ends the loop, so ModelThread.run returns."""
    import threading

    from openbook.serve.worker import ModelThread

    root, rag, encoder = tiny
    seen: dict[str, object] = {}
    ask = rag.ask

    def load():
        seen["load"] = threading.current_thread()
        return rag

    def recording_ask(*args, **kwargs):
        seen["ask"] = threading.current_thread()
        return ask(*args, **kwargs)

    host = ModelThread()
    app = create_app(config(root, encoder, load=load, host=host))
    answers: list = []

    async def go():
        async with client(app) as http:
            while (await http.get("/readyz")).status_code != 200:
                await asyncio.sleep(0.01)
            r = await http.post("/v1/ask", json={"question": "capital of france", "k": 3, "max_new_tokens": 4})
            answers.append(r)

    session = threading.Thread(target=lambda: run(go()))
    rag.ask = recording_ask
    try:
        session.start()
        host.run(session.is_alive)  # this (the test's) thread is the model's
        session.join()
    finally:
        rag.ask = ask
    assert answers and answers[0].status_code == 200, answers and answers[0].text
    direct = rag.ask(["capital of france"], k=3, num_beams=1, decoding="fast", max_new_tokens=4)[0]
    assert answers[0].json()["answers"][0]["answer"] == direct.answer
    assert seen == {"load": threading.current_thread(), "ask": threading.current_thread()}


def test_openbook_serve_exits_when_its_port_is_taken(tiny, tmp_path):
    """uvicorn runs in a second thread: when it cannot bind (and exits), the model's loop in the main thread is let
    go and the process ends with uvicorn's failure status instead of hanging."""
    import socket

    _, rag, encoder = tiny
    gen_dir, enc_dir, kb_dir = saved_tiny_models(rag, encoder, tmp_path)
    repo, env = subprocess_env()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "openbook", "serve", "--port", str(port), "--generator", str(gen_dir),
                   "--encoder", str(enc_dir), "--kb", str(kb_dir), "--untrained", "--dtype", "float32"]
        done = subprocess.run(command, env=env, cwd=repo, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0, done.stderr  # uvicorn's own status for a failed start-up (3 in uvicorn 0.54)
    assert "address already in use" in done.stderr.lower() and "Traceback" not in done.stderr
