"""LOADING while the module builds its index, and cursors that expire, on real servers."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, List

import pytest
import redis
import redis.backoff
import redis.cluster
import redis.retry
import valkey

import snapscan
import snapscan.asyncio
from conftest import Env
from servers import Server, info_field, wait_until

KEYS = 10_000


@pytest.fixture
def loading_server() -> Any:
    """A server populated with KEYS keys, then MODULE LOAD with a tiny backfill
    batch: the index build takes about a second, answering LOADING meanwhile."""
    s = Server(load_module=False)
    try:
        with s.client() as c:
            c.execute_command("DEBUG", "POPULATE", KEYS)
        s.module_load("backfill-batch", "5")
        yield s
    finally:
        s.stop()


def building(s: Server) -> bool:
    with s.client(decode_responses=True) as c:
        return info_field(c.execute_command("INFO", "snapshot"), "snapshot_backfill_in_progress") == "1"


@pytest.mark.parametrize("lib, mode", [("redis", "sync"), ("valkey", "async")])
def test_loading_is_retried_until_the_index_is_built(
    loading_server: Server, lib: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = loading_server
    # redis-py would retry LOADING itself (10 times by default): switch that off
    # so that what is tested is snapscan's retry.
    client = redis.Redis(host="127.0.0.1", port=s.port, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    # The module answers LOADING while it builds its index.
    with pytest.raises(redis.BusyLoadingError, match="snapscan is building its index"):
        client.execute_command("SNAPSHOT.SCAN", 0)
    caplog.set_level(logging.DEBUG, logger="snapscan")
    if mode == "sync":
        with pytest.raises(redis.BusyLoadingError):
            list(snapscan.snapshot_scan_iter(client, loading_timeout=0))
        got = list(snapscan.snapshot_scan_iter(client, count=1000, loading_timeout=30))
    else:

        async def go() -> List[Any]:
            client = valkey.asyncio.Valkey(host="127.0.0.1", port=s.port)
            try:
                with pytest.raises(valkey.BusyLoadingError):
                    [k async for k in snapscan.asyncio.snapshot_scan_iter(client, loading_timeout=0)]
                return [k async for k in snapscan.asyncio.snapshot_scan_iter(client, count=1000, loading_timeout=30)]
            finally:
                await client.aclose()

        got = asyncio.run(go())
    client.close()
    assert not building(s)
    retries = [r for r in caplog.records if r.name == "snapscan" and "LOADING" in r.getMessage()]
    assert len(retries) >= 1
    assert len(got) == KEYS and len(set(got)) == KEYS
    assert got == sorted(got)


def expired_count(s: Any) -> int:
    return int(info_field(s.execute_command("INFO", "snapshot"), "snapshot_cursors_expired") or 0)


def open_cursors(s: Any) -> int:
    return int(info_field(s.execute_command("INFO", "snapshot"), "snapshot_open_snapshots") or 0)


@pytest.fixture
def idle_timeout_1s(standalone: Server) -> Any:
    with standalone.client() as c:
        c.config_set("snapshot.cursor-idle-timeout", 1)
    try:
        yield
    finally:
        with standalone.client() as c:
            c.config_set("snapshot.cursor-idle-timeout", 60)


def test_expired_cursor_raises_snapshot_cursor_expired(
    standalone_env: Env, standalone: Server, idle_timeout_1s: None
) -> None:
    env = standalone_env
    raw = env.raw(decode_responses=True)
    for i in range(30):
        raw.set(f"k{i:02}", i)
    before = expired_count(raw)

    def idle_past_the_timeout() -> None:
        # Ours is the only open iteration: wait until none is left.
        assert open_cursors(raw) == 1
        wait_until("the cursor to expire", lambda: open_cursors(raw) == 0, 10)
        assert expired_count(raw) > before

    with pytest.raises(snapscan.SnapshotCursorExpired) as info:
        env.collect("snapshot_scan_iter", count=5, after_first=idle_past_the_timeout)
    raw.close()
    e = info.value
    assert e.command == "SNAPSHOT.SCAN" and e.cursor > 0 and e.node is None
    assert "restart the scan from cursor 0" in str(e)
    assert e.__cause__ is not None and type(e.__cause__).__name__ == "ResponseError"


def test_expired_cursor_in_a_cluster_names_the_node(cluster: Any) -> None:
    ports = cluster.ports
    nodes = [redis.Redis(host="127.0.0.1", port=p, decode_responses=True) for p in ports]
    rc = redis.cluster.RedisCluster(host="127.0.0.1", port=ports[0])
    try:
        for n in nodes:
            n.config_set("snapshot.cursor-idle-timeout", 1)
            n.flushall()
        for i in range(60):
            rc.set(f"k{i}", i)
        before = sum(expired_count(n) for n in nodes)
        it = snapscan.snapshot_scan_iter(rc, count=2)
        next(it)
        assert sum(open_cursors(n) for n in nodes) == 1
        wait_until("the cursor to expire", lambda: sum(open_cursors(n) for n in nodes) == 0, 10)
        assert sum(expired_count(n) for n in nodes) > before
        with pytest.raises(snapscan.SnapshotCursorExpired) as info:
            list(it)
        assert info.value.node in {f"127.0.0.1:{p}" for p in ports}
    finally:
        for n in nodes:
            n.config_set("snapshot.cursor-idle-timeout", 60)
            n.close()
        rc.close()
