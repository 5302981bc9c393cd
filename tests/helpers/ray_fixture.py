"""A local Ray cluster shared by the tests that need one (issue 12: 2 local workers on a 2-core machine).

Use it from a test module with ``from ray_fixture import ray_local  # noqa: F401`` and a ``ray_local``
argument. It starts Ray once per test session with 2 CPUs, a small object store and no dashboard, and
skips with a reason when Ray is not installed.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_local():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'openbook[scale]')")
    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        ray.init(num_cpus=2, object_store_memory=256 * 1024**2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    yield ray
    if started:
        ray.shutdown()
