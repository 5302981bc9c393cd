"""`openbook serve` on the command line: numeric flags refuse nan and inf, the admin token comes from a file or the
environment (never the examples' command line), and after --drain-s a request still computing gets a JSON 503 with
Retry-After while the process exits within the drain and 5 s."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from openbook.commands import finite_float, k_arg, nonnegative_float, positive_int
from openbook.commands.serve import _port, _positive_float, admin_token
from openbook.errors import InputError
from serve_helpers import free_port, saved_tiny_models, subprocess_env, tiny_rag, wait_ready

REPO = Path(__file__).resolve().parents[2]


def _serve_parser() -> argparse.ArgumentParser:
    from openbook.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["serve"]


@pytest.mark.parametrize("flag,value", [
    ("--max-wait-ms", "nan"), ("--max-wait-ms", "-1"), ("--timeout-s", "inf"), ("--drain-s", "nan"),
    ("--header-timeout-s", "nan"), ("--keep-alive-s", "inf"), ("--max-body-bytes", "0"), ("--port", "70000"),
])
def test_numeric_flags_refuse_non_finite_and_out_of_range_values(capsys, flag, value):
    from openbook.cli import main

    assert main(["serve", flag, value]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"openbook serve: error: argument {flag}: "), last


def test_every_numeric_serve_flag_has_a_checking_type():
    checked = {finite_float, nonnegative_float, positive_int, k_arg, _positive_float, _port}
    # --replicas is a whole number (never nan) checked by the command with its own one-line error
    numeric = [a for a in _serve_parser()._actions if a.type is not None and a.dest != "replicas"]
    assert numeric and all(a.type in checked for a in numeric), [(a.dest, a.type) for a in numeric]


def test_the_admin_token_comes_from_a_file_or_the_environment(tmp_path, monkeypatch):
    parse = _serve_parser().parse_args
    monkeypatch.delenv("OPENBOOK_ADMIN_TOKEN", raising=False)
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    assert admin_token(parse(["--admin-token-file", str(token_file)])) == "s3cret"
    monkeypatch.setenv("OPENBOOK_ADMIN_TOKEN", "from-env")
    assert admin_token(parse([])) == "from-env"
    assert admin_token(parse(["--admin-token-file", str(token_file)])) == "s3cret"
    for bad in (["--admin-token-file", str(tmp_path / "missing")], ["--admin-token-file", str(token_file),
                                                                       "--admin-token", "x"]):
        with pytest.raises(InputError, match="--admin-token"):
            admin_token(parse(bad))
    token_file.write_text("\n")
    with pytest.raises(InputError, match="one token"):
        admin_token(parse(["--admin-token-file", str(token_file)]))


def test_no_example_puts_the_admin_token_on_the_command_line():
    examples = [_serve_parser().epilog, (REPO / "README.md").read_text(encoding="utf-8")]
    for text in examples:
        commands = [line for line in text.splitlines() if "openbook serve" in line]
        assert commands and not any(re.search(r"--admin-token[ =]", line) for line in commands), commands


def test_a_taken_port_is_one_error_line_and_no_announcement(tmp_path):
    import socket

    repo, env = subprocess_env()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "openbook", "serve", "--port", str(port), "--generator",
                               str(tmp_path / "never-loaded")], env=env, cwd=repo, capture_output=True, text=True,
                              timeout=600)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"openbook: error: --port {port}: cannot listen on 127.0.0.1:{port}")
    assert "answering at" not in done.stderr


SLOW_SERVE = """
import sys, time
from pathlib import Path
from openbook.rag import RAG

ask = RAG.ask

def slow_ask(self, questions, *args, **kwargs):  # the test's slow request: 'slow' computes for two minutes
    if "slow" in questions:
        Path(sys.argv[1]).touch()
        for _ in range(2400):
            time.sleep(0.05)
    return ask(self, questions, *args, **kwargs)

RAG.ask = slow_ask
from openbook.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_after_the_drain_a_computing_request_gets_503_and_the_process_exits(tmp_path):
    rag, encoder = tiny_rag(tmp_path)
    gen_dir, enc_dir, kb_dir = saved_tiny_models(rag, encoder, tmp_path)
    port, drain_s = free_port(), 2.0
    repo, env = subprocess_env()
    marker = tmp_path / "computing"
    command = [sys.executable, "-c", SLOW_SERVE, str(marker), "serve", "--port", str(port), "--generator",
               str(gen_dir), "--encoder", str(enc_dir), "--kb", str(kb_dir), "--untrained", "--dtype", "float32",
               "--max-wait-ms", "1", "--drain-s", str(drain_s)]
    process = subprocess.Popen(command, env=env, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        wait_ready(process, base, deadline)
        answers = []
        asking = threading.Thread(target=lambda: answers.append(
            httpx.post(f"{base}/v1/ask", json={"question": "slow", "max_new_tokens": 2}, timeout=120)))
        asking.start()
        while not marker.exists():
            assert asking.is_alive() and time.monotonic() < deadline, answers
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        process.wait(60)
        took = time.monotonic() - stopping
        asking.join(60)
    finally:
        if process.poll() is None:
            process.kill()
        _, err = process.communicate()
    assert answers and answers[0].status_code == 503, answers and answers[0].text
    assert answers[0].headers["retry-after"] == "1" and answers[0].json()["error"]["field"] is None
    assert took < drain_s + 5, f"exited {took:.1f} s after SIGTERM"
    assert "Traceback" not in err, err
