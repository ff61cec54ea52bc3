"""A django-redis client for Redis Cluster, on redis-py's ``RedisCluster`` (django-redis has none).

``CACHES["memory"]["OPTIONS"]["CLIENT_CLASS"] = "memory.cache.cluster.ClusterClient"`` with a seed
node (or several, comma-separated) as ``LOCATION``; the client discovers the other nodes and
follows slot moves and failovers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from django_redis.client.default import DefaultClient, _main_exceptions
from django_redis.exceptions import ConnectionInterrupted
from django_redis.pool import ConnectionFactory
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import (
    ClusterCrossSlotError,
    ClusterDownError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

__all__ = ["ClusterClient", "ClusterConnectionFactory", "MemoryRedisCluster"]

T = TypeVar("T")

logger = logging.getLogger("memory.cache")


def _mapped(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``call``, turning redis-py's cluster-only errors into its ordinary ones.

    ``RedisClusterException`` is not a ``RedisError``. An uncovered slot, an unreachable cluster and
    CLUSTERDOWN/MASTERDOWN/TRYAGAIN become ``ConnectionError`` (down); any other cluster-only error
    (a cross-slot command) becomes ``ClusterCrossSlotError``, a bug, never an outage.
    """
    try:
        return call(*args, **kwargs)
    except (ClusterDownError, TryAgainError) as e:
        # NOTE: ResponseErrors in redis-py, but a failover or resharding in progress.
        raise RedisConnectionError(str(e)) from e
    except SlotNotCoveredError as e:
        raise RedisConnectionError(str(e)) from e
    except RedisClusterException as e:
        if isinstance(e.__cause__, (RedisConnectionError, RedisTimeoutError, OSError)):
            raise RedisConnectionError(str(e)) from e
        raise ClusterCrossSlotError(str(e)) from e


REFRESH_RETRY_SECONDS = 0.5


class _Refresher:
    """Rebuilds a cluster client's view of the cluster (nodes, slot map) in a thread of its own:
    a failing command only asks for it, retried every ``REFRESH_RETRY_SECONDS`` until the cluster
    answers.
    """

    def __init__(self, initialize: Callable[..., Any]) -> None:
        self._initialize = initialize
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = False
        self.failures = 0
        self.last_error: str | None = None

    def on_refresher(self) -> bool:
        return threading.current_thread() is self._thread

    def request(self) -> None:
        """Have the view rebuilt soon; returns at once."""
        with self._lock:
            self._again = True
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._run, name="memory-cluster-refresh", daemon=True
            )
            thread = self._thread
        thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._again:
                    self._thread = None
                    return
                self._again = False
            try:
                self._initialize()
            except Exception as e:  # every failure of a rebuild is retried, whatever it is
                with self._lock:
                    self._again = True
                self.failures += 1
                self.last_error = str(e)
                logger.debug("Could not read the cluster's slot map: %s", e)
                time.sleep(REFRESH_RETRY_SECONDS)
            else:
                self.last_error = None


class MemoryRedisCluster(RedisCluster):
    """``RedisCluster`` whose commands and pipelines raise only ``RedisError`` subclasses, and
    whose view of the cluster is rebuilt off the request path (``_Refresher``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # NOTE: a MOVED reply patches its one slot and asks for a rebuild in the background.
        kwargs.setdefault("reinitialize_steps", 2**31)
        super().__init__(*args, **kwargs)
        manager = self.nodes_manager
        rebuild = manager.initialize
        self.refresher = _Refresher(rebuild)

        def initialize(*args: Any, **kwargs: Any) -> None:
            if self.refresher.on_refresher():
                rebuild(*args, **kwargs)
            else:
                self.refresher.request()

        manager.initialize = initialize  # type: ignore[method-assign]

    def refresh_later(self) -> None:
        """Have the slot map rebuilt in the background (a failover seen by a caller)."""
        self.refresher.request()

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return _mapped(super().execute_command, *args, **kwargs)

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        # redis-py leaves RedisCluster.pipeline unannotated.
        pipe = super().pipeline(  # type: ignore[no-untyped-call]
            transaction=transaction, shard_hint=shard_hint
        )
        execute = pipe.execute

        def mapped_execute(raise_on_error: bool = True) -> Any:
            return _mapped(execute, raise_on_error)

        pipe.execute = mapped_execute
        return pipe


class ClusterConnectionFactory(ConnectionFactory):  # type: ignore[misc]  # django-redis: no types
    """Hands out one ``RedisCluster`` per ``LOCATION`` and process, built from the OPTIONS.

    ``SOCKET_TIMEOUT``/``SOCKET_CONNECT_TIMEOUT``/``PASSWORD`` apply to every node;
    ``CLUSTER_OPTIONS`` goes to ``RedisCluster``. A cluster no seed answers raises
    ``ConnectionError`` (down).
    """

    # NOTE: process-global: the slot table must not be rediscovered per request.
    _clusters: dict[str, RedisCluster] = {}
    _clusters_lock = threading.Lock()

    def connect(self, url: str) -> RedisCluster:
        with self._clusters_lock:
            cluster = self._clusters.get(url)
            if cluster is None:
                cluster = self._clusters[url] = _mapped(self._cluster, url)
            return cluster

    def _cluster(self, location: str) -> RedisCluster:
        seeds = [seed.strip() for seed in location.split(",") if seed.strip()]
        params = self.make_connection_params(seeds[0])
        params.pop("url")
        params.pop("parser_class", None)
        kwargs = {
            key: value
            for key, value in parse_url(seeds[0]).items()
            if key in {"username", "password", "ssl", "ssl_cert_reqs", "ssl_ca_certs"}
        }
        # NOTE: no replica reads (``load_balancing_strategy``, ``read_from_replicas``): a replica
        # may lag behind the deltas and floors the primary acknowledged (docs/scaling.md).
        options: dict[str, Any] = {
            # NOTE: owners on the surviving primaries keep their cache during a failover.
            "require_full_coverage": False,
            # NOTE: no retry: the refresher and the breaker bound an outage to one socket timeout.
            "retry": Retry(NoBackoff(), retries=0),
            **kwargs,
            **params,
            **self.options.get("CLUSTER_OPTIONS", {}),
        }
        nodes = [
            ClusterNode(urlsplit(seed).hostname, urlsplit(seed).port or 6379) for seed in seeds
        ]
        return MemoryRedisCluster(startup_nodes=nodes, **options)

    def disconnect(self, connection: Any) -> None:
        connection.disconnect_connection_pools()


class ClusterClient(DefaultClient):  # type: ignore[misc]  # django-redis has no types
    """django-redis's ``DefaultClient`` over a Redis Cluster, seeds in ``LOCATION``.

    Every owner's keys share one hash tag (``memory:v6:{digest}``), so each Lua script of the
    cache layer runs in one slot. ``get_many`` and ``set_many`` are split per slot, so they
    are not atomic, as on any cluster.
    """

    def __init__(self, server: Any, params: dict[str, Any], backend: Any) -> None:
        options = params.setdefault("OPTIONS", {})
        options.setdefault("CONNECTION_FACTORY", "memory.cache.cluster.ClusterConnectionFactory")
        # NOTE: several seeds are one cluster, not a primary and replicas: one LOCATION.
        if isinstance(server, (list, tuple, set)):
            server = ",".join(server)
        super().__init__([server], params, backend)

    def get_many(self, keys: Any, version: int | None = None, client: Any = None) -> dict[Any, Any]:
        """Values of ``keys`` that exist, read slot by slot (``MGET`` cannot cross slots)."""
        if client is None:
            client = self.get_client(write=False)
        if not keys:
            return {}
        made = {self.make_key(key, version=version): key for key in keys}
        try:
            values = client.mget_nonatomic(list(made))
        except _main_exceptions as e:
            raise ConnectionInterrupted(connection=client) from e
        return {
            made[key]: self.decode(value)
            for key, value in zip(made, values, strict=True)
            if value is not None
        }
