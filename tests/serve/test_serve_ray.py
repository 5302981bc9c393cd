"""`openbook serve --ray`: the same FastAPI app as a Ray Serve deployment of 2 replicas on the shared local Ray
(tests/helpers/ray_fixture.py), in front of the shard actors of a sharded knowledge base. Over HTTP the replicas answer
as the in-process app does; admin writes answer 409 with several replicas; shutting Ray Serve down stops the
HTTP server and leaves the driver's shard actors to the driver. Tiny random models, no downloads."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from openbook.cli import main
from openbook.index.sharded import ShardedKnowledgeBase, shard_knowledge_base
from openbook.rag import RAG
from ray_fixture import ray_local  # noqa: F401
from serve_helpers import (
    ADMIN,
    QUESTIONS,
    client,
    config,
    create_app,
    free_port,
    run,
    saved_tiny_models,
    subprocess_env,
    tiny_rag,
)

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def deployed(ray_local, tmp_path_factory):  # noqa: F811
    """2 replicas answering at a free loopback port over a 2-shard knowledge base on 2 Ray actors (opened once,
    here, as `openbook serve --ray --kb SHARDED` does); and the in-process app over the same shards."""
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'ray[serve]')")
    from openbook.serve import ray_serve

    root = tmp_path_factory.mktemp("serve_ray")
    rag, encoder = tiny_rag(root)
    sharded = shard_knowledge_base(root / "kbs" / "main", 2, root / "sharded")
    on_ray, in_process = ShardedKnowledgeBase.load(sharded, ray_address="local"), ShardedKnowledgeBase.load(sharded)
    remote = RAG(rag.query_encoder, rag.generator, on_ray, model="rag-token", k=3).eval()
    local = RAG(rag.query_encoder, rag.generator, in_process, model="rag-token", k=3).eval()
    port = free_port()
    ray_serve.start(config(root, encoder, load=lambda: remote), replicas=2, host=HOST, port=port)
    try:
        yield {"url": f"http://{HOST}:{port}", "app": create_app(config(root, encoder), rag=local),
               "on_ray": on_ray, "ray_serve": ray_serve}
    finally:
        ray_serve.stop(started=False, shared=on_ray)
        in_process.close()


def in_process(app, requests: list[tuple[str, dict]]) -> list[dict]:
    async def go():
        async with client(app) as http:
            return [(await http.post(path, json=body)).json() for path, body in requests]

    return run(go())


def same_answers(body: dict, expected: bool = False) -> dict:
    """What must be equal between two servers: not timings or batch sizes, and scores to float32 rounding (a
    replica's torch may use another number of threads)."""
    if "answers" in body:
        return {"kb": body["kb"], "answers": [{key: answer[key] for key in ("answer", "model", "tokens", "token_texts")}
                                              | {"passages": [p["id"] for p in answer["passages"]]}
                                              for answer in body["answers"]]}
    return {"kb": body["kb"], "results": [
        {"question": r["question"], "passages": [p["id"] for p in r["passages"]],
         "scores": scores(r["passages"], expected)} for r in body["results"]]}


def scores(passages: list[dict], expected: bool):
    values = [p["score"] for p in passages]
    return pytest.approx(values, rel=1e-5, abs=1e-6) if expected else values


def test_two_replicas_answer_as_the_in_process_app(deployed):
    assert deployed["ray_serve"].running_replicas() == 2
    requests = [("/v1/ask", {"question": q, "k": 3, "max_new_tokens": 4}) for q in QUESTIONS]
    requests += [("/v1/ask", {"question": QUESTIONS[:3], "model": "rag-sequence", "beams": 2, "max_new_tokens": 4}),
                 ("/v1/retrieve", {"question": QUESTIONS, "k": 3})]
    with httpx.Client(base_url=deployed["url"], timeout=120) as http:
        assert http.get("/readyz").json() == {"status": "ready"}
        responses = [http.post(path, json=body) for path, body in requests]
    assert [r.status_code for r in responses] == [200] * len(requests), [r.text for r in responses]
    expected = in_process(deployed["app"], requests)
    assert [same_answers(r.json()) for r in responses] == [same_answers(body, expected=True) for body in expected]
    assert responses[0].json()["kb"] == {"name": "sharded", "version": 1}


def test_admin_writes_answer_409_with_several_replicas(deployed):
    with httpx.Client(base_url=deployed["url"], timeout=120) as http:
        swap = http.post("/v1/kb/swap", json={"name": "other"}, headers=ADMIN)
        add = http.post("/v1/kb/passages", json={"passages": [{"title": "t", "text": "a new passage"}]}, headers=ADMIN)
        kb = http.get("/v1/kb")
    assert (swap.status_code, add.status_code) == (409, 409)
    message = swap.json()["error"]["message"]
    assert "2 Ray Serve replicas" in message and "--replicas 1" in message
    assert kb.status_code == 200 and kb.json()["name"] == "sharded"


def test_shutdown_stops_http_and_leaves_the_shard_actors_to_the_driver(deployed):
    import numpy as np

    deployed["ray_serve"].stop(started=False)
    with pytest.raises(httpx.TransportError):
        httpx.get(deployed["url"] + "/healthz", timeout=5)
    on_ray = deployed["on_ray"]
    scores, ids = on_ray.search(np.ones((1, on_ray.dim), np.float32), 2)  # replicas never closed the shared actors
    assert ids.shape == (1, 2)


def test_cli_joins_a_cluster_by_address_and_sigterm_shuts_serve_down(deployed, ray_local, tmp_path):  # noqa: F811
    """`openbook serve --ray ADDRESS` in its own process, on tiny model folders and an ordinary --kb (which the
    replica opens itself); SIGTERM shuts Ray Serve down and the process exits 0. After the in-process deployment
    (this module's earlier tests), on the same local Ray."""
    rag, encoder = tiny_rag(tmp_path)
    gen_dir, enc_dir, kb_dir = saved_tiny_models(rag, encoder, tmp_path)
    port = free_port()
    repo, env = subprocess_env()
    command = [sys.executable, "-m", "openbook", "serve", "--ray", ray_local.get_runtime_context().gcs_address,
               "--replicas", "1", "--port", str(port), "--generator", str(gen_dir), "--encoder", str(enc_dir),
               "--kb", str(kb_dir), "--untrained", "--dtype", "float32"]
    process = subprocess.Popen(command, env=env, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def read():
        for line in process.stderr:
            lines.append(line)

    reading = threading.Thread(target=read, daemon=True)
    reading.start()
    base = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 600
        while not any("replica(s) answering at" in line for line in lines):  # deployed: SIGTERM now stops serving
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.5)
        assert httpx.get(f"{base}/readyz", timeout=30).status_code == 200
        answer = httpx.post(f"{base}/v1/ask", json={"question": "capital of france", "max_new_tokens": 3}, timeout=120)
        assert answer.status_code == 200 and answer.json()["kb"] == {"name": "kb", "version": 1}, answer.text
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0, "".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
        reading.join(30)
    err = "".join(lines)
    assert "openbook: shutting Ray Serve down" in err and "Traceback" not in err, err
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/healthz", timeout=5)


def test_one_replica_batches_fully_and_edits_a_sharded_book_on_the_drivers_shard_actors(ray_local, tmp_path):  # noqa: F811
    """With one replica admin writes are on. Ray Serve lets the replica hold a full batch (its default of 5 requests
    in flight per replica capped every batch at 5). An edit of a sharded knowledge base that the driver opened on Ray
    actors is served from those same actors: the replica's new version is a view of them (``at_version``), not the
    shards opened again in the replica's process; retiring its old view releases the edited shard's old version
    there and leaves the actors, which the driver owns, running."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'ray[serve]')")
    from openbook.index.sharded import read_shards_manifest
    from openbook.serve import ray_serve
    from serve_helpers import PASSAGES

    rag, encoder = tiny_rag(tmp_path)
    sharded = shard_knowledge_base(tmp_path / "kbs" / "main", 2, tmp_path / "kbs" / "sharded")
    on_ray = ShardedKnowledgeBase.load(sharded, ray_address="local")
    remote = RAG(rag.query_encoder, rag.generator, on_ray, model="rag-token", k=3).eval()
    port = free_port()
    try:
        settings = config(tmp_path, encoder, load=lambda: remote, max_batch_size=8, max_wait_ms=3000.0)
        ray_serve.start(settings, replicas=1, host=HOST, port=port)

        def ask(question):  # the batch waits up to 3 s for its 8 questions, which arrive at once
            return httpx.post(f"http://{HOST}:{port}/v1/ask", json={"question": question, "max_new_tokens": 2},
                              timeout=120)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, (QUESTIONS * 2)[:8]))
        assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
        assert max(a.json()["batch_size"] for a in answers) == 8
        with httpx.Client(base_url=f"http://{HOST}:{port}", timeout=120) as http:
            new = {"passages": [{"id": "sun", "title": "Sun", "text": "the sun is a star at the centre"}]}
            added = http.post("/v1/kb/passages", json=new, headers=ADMIN)
            assert added.status_code == 200, added.text
            every = {"question": "the sun is a star at the centre", "k": len(PASSAGES) + 1}
            found = http.post("/v1/retrieve", json=every)
        assert added.json()["kb"] == {"name": "sharded", "version": 2}
        assert "sun" in [p["id"] for p in found.json()["results"][0]["passages"]]
        shard_versions = read_shards_manifest(sharded)["versions"][-1]["shards"]
        open_versions = ray_local.get([handle.actor.open_versions.remote() for handle in on_ray._handles])
        assert sorted(shard_versions) == [1, 2] and open_versions == [[v] for v in shard_versions]
        _, rows = on_ray.search(np.ones((1, on_ray.dim), np.float32), 2)  # the driver's actors still answer (its
        assert rows.shape == (1, 2)  # view, at version 1, opens the edited shard's version 1 again)
    finally:
        ray_serve.stop(started=False, shared=on_ray)


def test_ray_serve_sends_a_replica_what_its_worker_holds_and_bounds_its_own_queue():
    """Each replica may have a running batch and a full queue in flight (Ray's default, 5, capped batches at 5), and
    Ray queues at most max_queue more at a proxy, then answers 503 with Retry-After as `openbook serve` does."""
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'ray[serve]')")
    from openbook.serve import ServeConfig
    from openbook.serve.app import RETRY_AFTER_S
    from openbook.serve.ray_serve import queue_options

    options = queue_options(ServeConfig(max_batch_size=16, max_queue=40))
    assert (options["max_ongoing_requests"], options["max_queued_requests"]) == (56, 40)
    assert (options["backpressure_config"].status_code, options["backpressure_config"].retry_after_s) == \
        (503, RETRY_AFTER_S)


@pytest.mark.parametrize(("argv", "message"), [
    (["serve", "--ray", "--replicas", "0"], "--replicas must be at least 1, got 0"),
    (["serve", "--replicas", "2"], "--replicas needs --ray (without it one process serves the model)"),
])
def test_serve_ray_refuses_bad_flags_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"openbook: error: {message}\n"


def test_replicas_load_the_model_with_every_model_option_serve_takes():
    """``--ray`` hands each replica the model options by name (MODEL_OPTIONS): every option of `openbook serve` that
    the one model loader reads must be among them (``--device`` was not, so replicas ignored it)."""
    import argparse
    import inspect
    import re

    from openbook.cli import build_parser
    from openbook.commands import options
    from openbook.commands.serve import MODEL_OPTIONS

    read = set(re.findall(r'getattr\(args, "(\w+)"', inspect.getsource(options.model_from_args))) | {"device"}
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    declared = {action.dest for action in subparsers.choices["serve"]._actions}
    assert read & declared <= set(MODEL_OPTIONS), sorted(read & declared - set(MODEL_OPTIONS))
