#!/usr/bin/env python
"""Take docs/serve-screenshot.png: the web page of ``openbook serve`` answering one question.

Starts ``openbook serve`` on a free loopback port (the shipped default model and the demo knowledge base
unless options after ``--`` say otherwise), waits for /readyz, opens the page in Debian's ``chromium``
driven by Playwright, asks the question with the chosen model (RAG-Token by default, so that the page
shows the per-token heat map of Figure 2), waits for the whole answer and saves a full-page screenshot.
The server is stopped at the end, also on failure.

Usage: python scripts/serve_screenshot.py [--question Q] [--model rag-token|rag-sequence] [--k K]
           [--width PX] [--out docs/serve-screenshot.png] [--chromium PATH] [--timeout-s S] [-- SERVE_OPTION ...]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUESTION = "Who got the first Nobel Prize in Physics?"


def find_chromium(explicit: str | None = None) -> str | None:
    """The Chromium to drive: ``explicit`` if given, else Debian's ``chromium`` on PATH or /usr/bin."""
    if explicit:
        return explicit if Path(explicit).is_file() else None
    found = shutil.which("chromium") or "/usr/bin/chromium"
    return found if Path(found).is_file() else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    serve_options = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--question", default=QUESTION)
    p.add_argument("--model", choices=["rag-token", "rag-sequence"], default="rag-token",
                   help="the page's model control (RAG-Token shows the heat map)")
    p.add_argument("--k", type=int, default=5, help="passages to retrieve (default 5)")
    p.add_argument("--width", type=int, default=1000, help="viewport width in CSS pixels (320..2560)")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "serve-screenshot.png")
    p.add_argument("--chromium", help="the browser executable (default: chromium on PATH, /usr/bin/chromium)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="give up after this long (default 600)")
    args = p.parse_args(own)
    if not args.question.strip():
        p.error("--question must not be empty")
    if not 1 <= args.k <= 20:  # the API's cap
        p.error("--k must be between 1 and 20")
    if not 320 <= args.width <= 2560:
        p.error("--width must be between 320 and 2560")
    if args.timeout_s <= 0:
        p.error("--timeout-s must be positive")
    if args.out.suffix.lower() != ".png":
        p.error("--out must name a .png file")
    if "--port" in serve_options or "--host" in serve_options:
        p.error("the script chooses the port and host itself: leave --port/--host out of the serve options")
    args.chromium = find_chromium(args.chromium)
    if args.chromium is None:
        p.error("no chromium found: apt-get install -y chromium, or pass --chromium PATH")
    args.serve_options = serve_options
    return args


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, server: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"openbook serve exited with code {server.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit("openbook serve was not ready in time (raise --timeout-s)")


def screenshot(args: argparse.Namespace, url: str, deadline: float) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": args.width, "height": 900}, device_scale_factor=1)
            page.goto(url + "/")
            page.select_option("#model", args.model)
            page.fill("#k", str(args.k))
            page.fill("#question", args.question)
            page.press("#question", "Enter")
            timeout_ms = max(1.0, deadline - time.monotonic()) * 1000
            page.wait_for_function("document.querySelector('#passages li') || !document.querySelector('#error').hidden",
                                   timeout=timeout_ms)
            if page.is_visible("#error"):
                raise SystemExit(f"the page shows an error: {page.inner_text('#error')}")
            page.locator("#question").blur()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out), full_page=True)
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.timeout_s
    server = subprocess.Popen([sys.executable, "-m", "openbook", "serve", "--host", "127.0.0.1", "--port", str(port),
                               *args.serve_options], cwd=REPO)
    try:
        wait_ready(url, server, deadline)
        screenshot(args, url, deadline)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    print(f"{args.out}: {args.question!r} answered with {args.model}")


if __name__ == "__main__":
    main()
