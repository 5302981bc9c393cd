"""bench/serve_load.py: its figures, its clients against a stub server, and one short run on a tiny model."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from collections import Counter

import numpy as np
import pytest

from bench_scripts import bench_modules
from tolerance import tolerance


@pytest.fixture(scope="module")
def bench():
    with bench_modules("serve_load") as modules:
        yield modules


@pytest.fixture(scope="module")
def offline(bench):
    return importlib.import_module("_offline_bound")  # imported by serve_load


@pytest.mark.parametrize("values", [[0.8], [0.5, 2.0], [3.0, 1.0, 2.0, 10.0, 0.25], list(np.linspace(0.1, 3.0, 150))])
def test_latency_percentiles_are_numpys_in_milliseconds(bench, values):
    got = bench.latency_ms(values)
    for q in (50, 95, 99):
        want = 1000 * float(np.percentile(values, q))
        # rounded to 0.1 ms, after two interpolations between the same order statistics
        assert got[f"p{q}_ms"] == pytest.approx(want, abs=0.05 + tolerance(want, terms=4, dtype="float64")["atol"])
    assert got["mean_ms"] == pytest.approx(1000 * float(np.mean(values)), abs=0.05 + 1e-9 * len(values))
    assert bench.latency_ms([]) == {"p50_ms": None, "p95_ms": None, "p99_ms": None, "mean_ms": None}


def test_phase_figures_count_answers_in_the_window(bench):
    phase = bench.Phase(seconds=4.0, latencies=[0.1, 0.2, 0.3, 0.4, 5.0], in_window=4,
                        errors=Counter({"http 503": 2}), batch_sizes=[1, 2, 2, 3, 2])
    figures = bench.phase_figures(phase, 8)
    assert figures["qps"] == 1.0  # 4 answers inside the 4 s window; the fifth came after it
    assert figures["answers"] == 5 and figures["concurrency"] == 8 and figures["mean_batch_size"] == 2.0
    assert figures["errors"] == 2 and figures["error_kinds"] == {"http 503": 2}


def test_mixed_version_answers_checks_every_passage_against_the_named_version(bench):
    books = {("leaders-2016", 1): {"2016:PER:x", "2016:FRA:x"}, ("leaders-2018", 1): {"2018:PER:x"},
             ("leaders-2018", 2): {"2018:PER:x", "2018:NEW:x"}}
    lookup = lambda name, version: books.get((name, version))  # noqa: E731
    assert bench.mixed_version_answers([("leaders-2016", 1, ["2016:PER:x", "2016:FRA:x"]),
                                        ("leaders-2018", 2, ["2018:NEW:x"]), ("leaders-2018", 1, [])], lookup) == 0
    mixed = [("leaders-2016", 1, ["2016:PER:x", "2018:PER:x"]),  # one passage of the other book
             ("leaders-2018", 1, ["2018:NEW:x"]),  # a passage of a later version than the one named
             ("elsewhere", 1, ["2016:PER:x"])]  # a book nobody can check
    assert bench.mixed_version_answers(mixed, lookup) == 3


def levels(c32_qps=10.0, c32_errors=0):
    level = {"qps": 4.0, "p99_ms": 900.0, "errors": 0}
    return {"c1": level, "c8": {**level, "p99_ms": 1234.5}, "c32": {**level, "qps": c32_qps, "errors": c32_errors},
            "c32_swap": level, "c32_unbatched": {**level, "qps": 5.0}}


def test_the_json_line_has_the_issues_figures(bench):
    line = json.loads(json.dumps(bench.result_line(levels(), offline_qps=10.5, swaps=6, swap_errors=0, mixed=0,
                                                   extra={"questions": 30})))
    for key in ("qps_c32_batched", "qps_c32_unbatched", "batching_speedup", "offline_batch_qps", "server_efficiency",
                "p99_ms_c8", "errors", "swaps", "mixed_version_answers", "levels"):
        assert key in line
    assert line["batching_speedup"] == 2.0 and line["server_efficiency"] == round(10 / 10.5, 3)
    assert line["p99_ms_c8"] == 1234.5 and line["errors"] == 0 and line["swaps"] == 6 and line["questions"] == 30
    assert line["meets_targets"] is True
    assert bench.result_line(levels(c32_qps=7.0), offline_qps=10.5, swaps=6, swap_errors=0, mixed=0,
                             extra={})["meets_targets"] is False  # speedup 1.4, efficiency 0.67
    timed = levels()
    timed["c32"]["compute_qps"] = 9.45  # the model's own rate in the server, against the offline bound
    assert bench.result_line(timed, offline_qps=10.5, swaps=0, swap_errors=0, mixed=0, extra={})["compute_efficiency"] == 0.9
    assert line["compute_efficiency"] is None  # a server that did not report its compute time
    failing = bench.result_line(levels(c32_errors=2), offline_qps=10.5, swaps=6, swap_errors=1, mixed=1, extra={})
    assert failing["errors"] == 3 and failing["mixed_version_answers"] == 1 and failing["meets_targets"] is False


def test_the_server_gets_the_model_options_and_the_batch_cap(bench):
    args = bench.parse_args(["--generator", "gen", "--encoder", "enc", "--kb", "kb", "--untrained", "--k", "3",
                             "--max-wait-ms", "2", "--request-timeout", "9"])
    assert bench.model_flags(args) == ["--kb", "kb", "--encoder", "enc", "--generator", "gen", "--k", "3",
                                       "--dtype", "auto", "--untrained"]
    flags = bench.serve_flags(args, 1)
    assert flags[-6:] == ["--max-batch-size", "1", "--timeout-s", "9.0", "--max-wait-ms", "2.0"]
    assert bench.ask_body(bench.ask_settings(3)[0]) == {"k": 3, "beams": 1, "decoding": "lazy", "max_new_tokens": 16}
    with pytest.raises(SystemExit):
        bench.parse_args(["--seconds", "0"])


def stub_server(state):
    """An httpx transport answering /v1/ask from the current book, with every 5th request a 503, and /v1/kb/swap."""
    import httpx

    async def handle(request):
        await asyncio.sleep(0.002)
        if request.url.path == "/v1/kb/swap":
            if request.headers.get("authorization") != "Bearer secret":
                return httpx.Response(401, json={"error": {"field": None, "message": "no"}})
            state["book"] = json.loads(request.content)["name"]
            return httpx.Response(200, json={"kb": {"name": state["book"], "version": 1}})
        state["asked"] += 1
        if state["asked"] % 5 == 0:
            return httpx.Response(503, json={"error": {"field": None, "message": "queue full"}})
        question = json.loads(request.content)["question"]
        answer = {"question": question, "answer": "x", "passages": [{"id": f"{state['book']}:{question}"}]}
        return httpx.Response(200, json={"answers": [answer], "kb": {"name": state["book"], "version": 1},
                                         "batch_size": 2, "timings": {"queue_ms": 1.0, "compute_ms": 500.0}})

    return httpx.MockTransport(handle)


def test_the_clients_count_answers_errors_and_swaps(bench, monkeypatch):
    import httpx

    state = {"book": "start", "asked": 0}
    real = httpx.AsyncClient
    monkeypatch.setattr(httpx, "AsyncClient", lambda **kw: real(transport=stub_server(state), **kw))
    swapper = bench.Swapper(["a", "b"], every=0.1, token="secret")
    phase = asyncio.run(bench.drive("http://stub", 4, 0.45, ["q1", "q2"], {"k": 2}, 5.0, swapper))
    assert swapper.counts == Counter(swaps=5)  # before the window, then at 0.1, 0.2, 0.3 and 0.4 s
    assert state["book"] == "a"  # a, then b, a, b, a
    assert phase.errors == Counter({"http 503": state["asked"] // 5})
    assert len(phase.latencies) == state["asked"] - state["asked"] // 5 >= phase.in_window > 0
    assert phase.batch_sizes == [2] * len(phase.latencies) and phase.compute_s == [0.5] * len(phase.latencies)
    assert bench.phase_figures(phase, 4)["compute_qps"] == 4.0  # batches of 2 answers in 0.5 s of compute
    assert {name for name, _, _ in phase.answers} <= {"a", "b"}  # the first swap lands before any question
    assert all(ids == [f"{name}:q1"] or ids == [f"{name}:q2"] for name, _, ids in phase.answers)


def test_a_server_that_never_gets_ready_is_stopped_within_the_bound(bench, tmp_path):
    server = bench.Server([], tmp_path / "log", startup_timeout=1.0)
    server.command = [sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(60)"]
    with pytest.raises(SystemExit, match="not ready after 1 s"):
        with server:
            pass
    assert server.process.poll() is not None  # stopped, not left behind
    assert "loading" in server.tail()


LEADERS = """iso3,country,role,person,person_qid,start,end,party,end_cause
PER,Peru,head_of_state,Pedro Pablo Kuczynski,Q2,2016-07-28T00:00:00Z,2018-03-23T00:00:00Z,,
PER,Peru,head_of_state,Martín Vizcarra,Q3,2018-03-23T00:00:00Z,2020-11-10T00:00:00Z,,
FRA,França,head_of_state,François Hollande,Q4,2012-05-15T00:00:00Z,2017-05-14T00:00:00Z,,
FRA,França,head_of_state,Emmanuel Macron,Q5,2017-05-14T00:00:00Z,,,
"""


# slow: starts `openbook serve` twice and the offline bound once as subprocesses on a tiny saved model (each
# imports torch, transformers and FastAPI)
@pytest.mark.slow
def test_one_short_run_on_a_tiny_model(bench, tmp_path, capsys, monkeypatch):
    from tiny_runs import save_tiny_models

    gen_dir, enc_dir, kb_dir = save_tiny_models(tmp_path)
    (tmp_path / "leaders.csv").write_text(LEADERS, encoding="utf-8")
    real, servers = bench.Server, []
    real_bound, bounds = bench.OfflineBound, []

    def recording(*args, **kwargs):
        servers.append(real(*args, **kwargs))
        return servers[-1]

    def recording_bound(*args, **kwargs):
        bounds.append(real_bound(*args, **kwargs))
        return bounds[-1]

    monkeypatch.setattr(bench, "Server", recording)
    monkeypatch.setattr(bench, "OfflineBound", recording_bound)
    bench.main(["--generator", str(gen_dir), "--encoder", str(enc_dir), "--kb", str(kb_dir), "--untrained", "--k", "2",
                "--seconds", "1", "--swap-every", "0.3", "--leaders", str(tmp_path / "leaders.csv"),
                "--startup-timeout", "300"])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["errors"] == 0 and line["mixed_version_answers"] == 0 and line["swaps"] == 4  # first + 0.3/0.6/0.9 s
    assert line["swap_books"] == ["leaders-2016", "leaders-2018"] and line["swap_questions"] == 2
    assert set(line["levels"]) == {"c1", "c8", "c32", "c32_swap", "c32_unbatched"}
    assert all(level["answers"] > 0 for level in line["levels"].values())
    assert line["levels"]["c32_unbatched"]["mean_batch_size"] == 1.0 and line["levels"]["c32"]["mean_batch_size"] > 1
    assert line["offline_batch_qps"] > 0 and line["qps_c32_batched"] == line["levels"]["c32"]["qps"]
    assert line["levels"]["c32"]["compute_qps"] > 0  # the server reported its compute time
    assert line["rounds"] == 2 and line["levels"]["c32"]["rounds_qps"] and len(line["levels"]["c32"]["rounds_qps"]) == 2
    assert len(line["per_round"]["batching_speedup"]) == 2 and len(line["per_round"]["offline_batching_speedup"]) == 2
    assert line["offline_single_qps"] > 0
    assert len(servers) == 2 and all(s.process.poll() is not None for s in servers)  # both stopped
    assert len(bounds) == 1 and bounds[0].process.poll() == 0  # and the offline bound ended by itself


def test_steady_qps_times_batches_from_the_first_ones_end(bench):
    # batches of 4 ending at 10, 20 and 30 s, and one of 4 after the 35 s window: 8 answers in the 20 s after
    # the first batch's end, whatever the window's edges
    ends = [10.0] * 4 + [20.0, 20.01, 20.02, 20.03] + [30.0] * 4 + [40.0] * 4
    sizes = [4] * 16
    assert bench.steady_qps(ends, sizes, 35.0) == pytest.approx(8 / 20.0)
    phase = bench.Phase(seconds=35.0, latencies=[1.0] * 16, in_window=12, batch_sizes=sizes, ends=ends)
    figures = bench.phase_figures(phase, 32)
    assert figures["qps"] == 0.4 and figures["qps_window"] == round(12 / 35.0, 3)
    # one answer at a time: n - 1 answers over the time between the first and the last
    assert bench.steady_qps([1.0, 2.0, 3.5, 4.0], [1, 1, 1, 1], 10.0) == pytest.approx(3 / 3.0)
    # a single batch (or none) inside the window has no rate: the window's count stands in
    assert bench.steady_qps([5.0] * 4, [4] * 4, 10.0) is None and bench.steady_qps([], [], 10.0) is None
    single = bench.phase_figures(bench.Phase(seconds=10.0, latencies=[1.0] * 4, in_window=4, batch_sizes=[4] * 4,
                                             ends=[5.0] * 4), 8)
    assert single["qps"] == 0.4


def test_the_offline_bound_is_a_fresh_process_of_this_script_that_idles_between_turns(offline, tmp_path):
    bound = offline.OfflineBound(["--k", "2", "--seconds", "5"], tmp_path / "log", timeout=60.0)
    assert bound.command[1].endswith("serve_load.py") and bound.command[2:] == ["--k", "2", "--seconds", "5",
                                                                               "--offline-only"]
    # a stand-in worker speaking the same protocol: noise, the ready line, then one JSON line per batch size asked
    bound.command = [sys.executable, "-c", (
        "import json, sys\n"
        "print('versions: ...'); print(%r, flush=True)\n"
        "for line in sys.stdin:\n"
        "    size = int(line); print('noise'); print(json.dumps({'batch_size': size, 'answers': 3 * size, "
        "'seconds': 1.5}), flush=True)\n") % offline.OFFLINE_READY]
    with bound:
        assert bound.turn(8) == (24, 1.5) and bound.turn(1) == (3, 1.5)
    assert bound.process.poll() == 0  # stdin closed: it ended by itself
    failing = offline.OfflineBound([], tmp_path / "log", timeout=60.0)
    failing.command = [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(SystemExit, match=r"offline bound failed \(3\)") as failed:
        with failing:
            pass
    assert "boom" in str(failed.value)
    hanging = offline.OfflineBound([], tmp_path / "log", timeout=1.0)
    hanging.command = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(SystemExit, match="offline bound failed"):
        with hanging:
            pass
    assert hanging.process.poll() is not None  # stopped within the bound, not left behind


def test_the_offline_bound_runs_whole_passes_over_the_questions(offline):
    calls = []

    class Counting:
        def ask(self, questions, **settings):
            calls.append(list(questions))
            return questions

    batches = offline.offline_batches([f"q{i}" for i in range(5)], 2)
    answers, seconds = offline.time_cycles(Counting(), batches, {}, 0.0)
    # one whole cycle of the clients' turn order even though the time is up at once, cut into batches as the server
    # cuts it: every question as often, in the batches the server sees
    assert calls == [["q0", "q1"], ["q2", "q3"], ["q4", "q0"], ["q1", "q2"], ["q3", "q4"]]
    assert answers == 10 and seconds >= 0


def test_the_rounds_alternate_their_order_and_pool_their_windows(bench):
    assert bench.schedule(3) == [bench.ARMS, bench.ARMS[::-1], bench.ARMS]  # A B C D, D C B A, A B C D
    assert set(bench.ARMS) == {"batched", "unbatched", "offline_batched", "offline_single"}
    # batches of 4 every 10 s in one window (8 steady answers in 20 s), every 5 s in the other (8 in 10 s)
    slow = bench.Phase(seconds=35.0, latencies=[1.0] * 12, in_window=12, batch_sizes=[4] * 12,
                       ends=[10.0] * 4 + [20.0] * 4 + [30.0] * 4, compute_s=[10.0] * 12)
    fast = bench.Phase(seconds=35.0, latencies=[2.0] * 12, in_window=12, batch_sizes=[4] * 12,
                       ends=[5.0] * 4 + [10.0] * 4 + [15.0] * 4, compute_s=[5.0] * 12, errors=Counter({"http 503": 1}))
    pooled = bench.pooled_figures([slow, fast], 32)
    assert pooled["qps"] == round(16 / 30.0, 3)  # not the mean of 0.4 and 0.8: every steady answer over their time
    assert pooled["rounds_qps"] == [0.4, 0.8] and pooled["answers"] == 24 and pooled["seconds"] == 70.0
    assert pooled["errors"] == 1 and pooled["mean_batch_size"] == 4.0 and pooled["p50_ms"] == 1500.0
    assert "rounds_qps" not in bench.phase_figures(slow, 32)  # one window: as before
    assert bench.pooled_rate([(10, 5.0), (30, 5.0)]) == 4.0


def test_the_header_names_the_cpu_and_its_matrix_extensions(bench, monkeypatch, tmp_path):
    common = importlib.import_module("_common")  # imported by serve_load
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some Xeon\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n"
                       "processor\t: 1\nmodel name\t: Some Xeon\nflags\t\t: fpu\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(cpuinfo if path == "/proc/cpuinfo" else path,
                                                                          *a, **k))
    assert common.cpu_description() == "Some Xeon (avx512_bf16, amx_bf16)"
    cpuinfo.write_text("model name\t: Some EPYC\nflags\t\t: fpu avx512f\n")
    assert common.cpu_description() == "Some EPYC (no AVX-512 BF16/VNNI or AMX)"
