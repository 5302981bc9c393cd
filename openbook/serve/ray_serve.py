"""``openbook serve --ray``: the app of :func:`~openbook.serve.app.create_app`, unchanged, as a Ray Serve
deployment of N replicas behind Ray Serve's HTTP proxy.

Each replica is one Ray actor that loads the model once (``ServeConfig.load``, in the actor) and then runs the
same FastAPI app as ``openbook serve``, with its own model worker and dynamic batches; the proxy spreads the
requests over the replicas. What a replica holds: its own generator and query encoder, and the knowledge base
the loader gives it. A sharded ``--kb`` is opened once, by the driver, on Ray actors (one per shard,
:func:`shared_knowledge_base`); every replica gets handles to those actors, so S shard actors serve all N
replicas. An ordinary knowledge base is opened by each replica (its index in each replica's memory).

Admin writes: with one replica they work as in ``openbook serve``; an edit of a sharded knowledge base on the shard
actors serves its new version from the same actors (the replica's copy shares them but does not own them, so
retiring its old version never stops them: :mod:`openbook.index.sharded.kb`). With more, a swap or an edit would
reach only the replica that received it, so the replicas are read-only: every admin write answers 409
(``READ_ONLY``).

Ray is optional: it is imported inside the functions here, with a one-line error if it is missing.
"""

from __future__ import annotations

import asyncio
import dataclasses

from openbook.errors import InputError, one_line, positive_int
from openbook.serve.app import RETRY_AFTER_S, ServeConfig, create_app

APP_NAME = "openbook"
REPLICA_CPUS = 1.0  # CPUs Ray reserves for each replica (a model replica is compute-bound)
READ_ONLY = ("this server runs {replicas} Ray Serve replicas and an edit or swap would reach only one of them, so "
             "admin writes are off (read-only); serve with --replicas 1 to edit or swap")


MISSING_SERVE = "--ray needs Ray Serve: pip install 'openbook[scale]'"


def import_serve():
    """``(ray, ray.serve)``, or a one-line error saying how to install them (the optional 'scale' extra)."""
    try:
        import ray
        from ray import serve
    except ImportError:
        raise InputError(MISSING_SERVE) from None
    return ray, serve


def connect(address: str | None) -> bool:
    """Join the Ray cluster at ``address`` (``"auto"``, ``"ray://head:10001"``), or with None start a local Ray
    (kept if this process already has one); True if this call started or joined it (then :func:`stop` leaves it)."""
    ray, _ = import_serve()
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as error:  # no cluster there, or a malformed address
        raise InputError(f"--ray {address or '(local)'}: {one_line(error, 300)}") from None
    return True


class Replica:
    """One replica: loads the model once, then answers with ``create_app(config, rag)``."""

    async def __init__(self, config: ServeConfig):
        self.config = config
        self.rag = await asyncio.to_thread(config.load)  # the actor keeps answering Serve's health checks

    def __serve_build_asgi_app__(self):
        return create_app(self.config, rag=self.rag)


def queue_options(config: ServeConfig) -> dict:
    """How many requests Ray Serve sends each replica, and how many it queues in front of them. Ray's default of 5
    requests in flight per replica capped every dynamic batch at 5 (``bench/serve_ray_load.py``); a replica takes
    as many as its model worker holds, a running batch and a full queue, and Ray queues ``max_queue`` more at each
    proxy, answering 503 with Retry-After beyond that, as ``openbook serve`` does when its queue is full."""
    try:
        from ray.serve.config import BackpressureConfig
    except ImportError:
        raise InputError(MISSING_SERVE) from None
    return {"max_ongoing_requests": config.max_batch_size + config.max_queue, "max_queued_requests": config.max_queue,
            "backpressure_config": BackpressureConfig(status_code=503, retry_after_s=RETRY_AFTER_S)}


def start(config: ServeConfig, replicas: int, host: str = "127.0.0.1", port: int = 8000,
          replica_cpus: float = REPLICA_CPUS) -> None:
    """Deploy ``replicas`` replicas of the app (each runs ``config.load``) on the Ray this process is connected
    to, answering at http://host:port/; return once every replica has loaded the model. With several replicas
    admin writes answer 409 (module docs)."""
    ray, serve = import_serve()
    replicas = positive_int(replicas, "--replicas")
    if config.load is None:
        raise InputError("a Ray Serve replica needs ServeConfig.load to build its model")
    cpus = ray.cluster_resources().get("CPU", 0)
    if replicas * replica_cpus > cpus:
        raise InputError(f"--replicas {replicas} needs {replicas * replica_cpus:g} CPUs ({replica_cpus:g} per "
                         f"replica) but the Ray cluster has {cpus:g}")
    if replicas > 1:
        config = dataclasses.replace(config, read_only=READ_ONLY.format(replicas=replicas))
    serve.start(http_options={"host": host, "port": port})
    deployment = serve.deployment(serve.ingress()(Replica), name=APP_NAME, num_replicas=replicas,
                                  ray_actor_options={"num_cpus": replica_cpus}, max_constructor_retry_count=1,
                                  **queue_options(config))
    try:
        serve.run(deployment.bind(config), name=APP_NAME, route_prefix="/", blocking=False)
    except RuntimeError as error:  # a replica's loader failed: Serve's message ends with the loader's error
        lines = [line for line in str(error).splitlines() if line.strip()]
        raise InputError(f"a replica failed to start: {lines[-1].strip() if lines else error}") from None


def running_replicas() -> int:
    """How many replicas of the deployment are running."""
    status = import_serve()[1].status().applications.get(APP_NAME)
    deployment = status.deployments.get(APP_NAME) if status is not None else None
    return deployment.replica_states.get("RUNNING", 0) if deployment is not None else 0


def stop(started: bool, shared=None) -> None:
    """Shut Ray Serve down (every replica finishes its lifespan: the model worker stops), then the shard actors
    of ``shared`` (:func:`shared_knowledge_base`), then the Ray this process started or joined (``started``,
    from :func:`connect`)."""
    ray, serve = import_serve()
    if ray.is_initialized():
        serve.shutdown()
        if shared is not None:
            shared.close()
        if started:
            ray.shutdown()


def shared_knowledge_base(path, address: str | None):
    """The sharded knowledge base at ``path`` on Ray actors the replicas share (one per shard, started here by
    the driver), or None if ``path`` is not sharded (each replica then opens it itself)."""
    from openbook.index import is_sharded
    from openbook.index.sharded import ShardedKnowledgeBase

    if path is None or not is_sharded(path):
        return None
    return ShardedKnowledgeBase.load(path, ray_address=address or "local")
