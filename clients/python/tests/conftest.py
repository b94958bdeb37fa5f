"""Fixtures: one standalone server and one 3-node cluster for the whole session
(each test starts from FLUSHALL), and ``env``: a client library (redis-py or
valkey-py), sync or asyncio, against either topology."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import valkey
import valkey.asyncio
import valkey.asyncio.cluster
import valkey.cluster

import snapscan
import snapscan.asyncio
from servers import Cluster, Server, info_field, server_binary


def pytest_report_header(config: Any) -> List[str]:
    name = os.environ.get("SNAPSCAN_SERVER_NAME", "")
    return [f"snapscan server: {name} {server_binary()}".replace("  ", " ")]


@pytest.fixture(scope="session")
def standalone() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()


def is_unknown_command(e: BaseException) -> bool:
    return "unknown command" in str(e).lower()


class Env:
    """How a test reaches the server: ``lib`` (redis/valkey) x ``mode``
    (sync/async) x ``topology`` (standalone/cluster)."""

    def __init__(self, lib: str, mode: str, topology: str, ports: List[int]) -> None:
        self.lib, self.mode, self.topology, self.ports = lib, mode, topology, ports

    def __repr__(self) -> str:
        return f"{self.lib}-{self.mode}-{self.topology}"

    @property
    def is_cluster(self) -> bool:
        return self.topology == "cluster"

    # Setup and checks always use a sync redis-py client.
    def raw(self, **kw: Any) -> Any:
        if self.is_cluster:
            return redis.cluster.RedisCluster(host="127.0.0.1", port=self.ports[0], **kw)
        return redis.Redis(host="127.0.0.1", port=self.ports[0], socket_timeout=10, **kw)

    def node_clients(self) -> List[redis.Redis]:
        return [redis.Redis(host="127.0.0.1", port=p, socket_timeout=10, decode_responses=True) for p in self.ports]

    def flushall(self) -> None:
        for c in self.node_clients():
            c.flushall()
            c.close()

    def scans_served(self) -> Dict[int, int]:
        """``snapshot_scans_served`` of each node, by port."""
        out = {}
        for p, c in zip(self.ports, self.node_clients()):
            out[p] = int(info_field(c.execute_command("INFO", "snapshot"), "snapshot_scans_served") or 0)
            c.close()
        return out

    def sync_client(self, **kw: Any) -> Any:
        mod = redis if self.lib == "redis" else valkey
        if self.is_cluster:
            cls = redis.cluster.RedisCluster if self.lib == "redis" else valkey.cluster.ValkeyCluster
            return cls(host="127.0.0.1", port=self.ports[0], **kw)
        cls = mod.Redis if self.lib == "redis" else mod.Valkey
        return cls(host="127.0.0.1", port=self.ports[0], socket_timeout=10, **kw)

    def async_client(self, **kw: Any) -> Any:
        if self.is_cluster:
            cls = redis.asyncio.cluster.RedisCluster if self.lib == "redis" else valkey.asyncio.cluster.ValkeyCluster
            return cls(host="127.0.0.1", port=self.ports[0], **kw)
        cls = redis.asyncio.Redis if self.lib == "redis" else valkey.asyncio.Valkey
        return cls(host="127.0.0.1", port=self.ports[0], socket_timeout=10, **kw)

    def collect(
        self,
        fname: str,
        *args: Any,
        after_first: Optional[Callable[[], None]] = None,
        client_kw: Optional[Dict[str, Any]] = None,
        **kw: Any,
    ) -> List[Any]:
        """Runs iterator ``fname`` of snapscan (or snapscan.asyncio) to the end and
        returns what it yielded; ``after_first`` runs once the first item is in."""
        client_kw = client_kw or {}
        if self.mode == "sync":
            c = self.sync_client(**client_kw)
            try:
                out = []
                for item in getattr(snapscan, fname)(c, *args, **kw):
                    out.append(item)
                    if after_first is not None and len(out) == 1:
                        after_first()
                return out
            finally:
                c.close()

        async def go() -> List[Any]:
            c = self.async_client(**client_kw)
            try:
                out = []
                async for item in getattr(snapscan.asyncio, fname)(c, *args, **kw):
                    out.append(item)
                    if after_first is not None and len(out) == 1:
                        after_first()
                return out
            finally:
                await c.aclose()

        return asyncio.run(go())

    def call(self, fname: str, *args: Any, **kw: Any) -> Any:
        """Calls function ``fname`` (e.g. unlink_matching) and returns its result."""
        if self.mode == "sync":
            c = self.sync_client()
            try:
                return getattr(snapscan, fname)(c, *args, **kw)
            finally:
                c.close()

        async def go() -> Any:
            c = self.async_client()
            try:
                return await getattr(snapscan.asyncio, fname)(c, *args, **kw)
            finally:
                await c.aclose()

        return asyncio.run(go())


ENV_PARAMS = [
    (lib, mode, topo)
    for topo in ("standalone", "cluster")
    for lib in ("redis", "valkey")
    for mode in ("sync", "async")
]


@pytest.fixture(params=ENV_PARAMS, ids=lambda p: "-".join(p))
def env(request: Any) -> Env:
    lib, mode, topo = request.param
    if topo == "cluster":
        ports = request.getfixturevalue("cluster").ports
    else:
        ports = [request.getfixturevalue("standalone").port]
    e = Env(lib, mode, topo, ports)
    e.flushall()
    return e


@pytest.fixture(params=[p for p in ENV_PARAMS if p[2] == "standalone"], ids=lambda p: "-".join(p))
def standalone_env(request: Any, standalone: Server) -> Env:
    lib, mode, topo = request.param
    e = Env(lib, mode, topo, [standalone.port])
    e.flushall()
    return e


@pytest.fixture(params=[p for p in ENV_PARAMS if p[2] == "cluster"], ids=lambda p: "-".join(p))
def cluster_env(request: Any, cluster: Cluster) -> Env:
    lib, mode, topo = request.param
    e = Env(lib, mode, topo, cluster.ports)
    e.flushall()
    return e
