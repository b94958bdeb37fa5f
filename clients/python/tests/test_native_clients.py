"""Issue 18 with Python clients nobody here wrote: redis-py's ``scan_iter``,
``hscan_iter``, ``sscan_iter``, ``zscan_iter``, ``RedisCluster.scan_iter`` on the
3-node cluster, and django-redis's ``delete_pattern``, against servers with
``snapshot.serve-native`` on.

On a quiet database each test runs the client once with the mode ``none`` (the
native commands) and once with it on, compares the two results exactly, and
checks that the snapshot counters (``snapshot_scans_served`` and the command's
``snapshot_native_<cmd>_served``) did not move in the first run and grew in
the second, on every node that was scanned.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Sequence, Tuple

import pytest
import redis
import redis.cluster

from servers import Cluster, Server, info_field

CONFIG = "snapshot.serve-native"
COUNTER_TIMEOUT = 5.0


def counters(port: int) -> Dict[str, int]:
    """``snapshot_scans_served`` and every ``snapshot_native_<cmd>_served|native|restarted`` of one node."""
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, decode_responses=True) as c:
        info = c.execute_command("INFO", "snapshot")
    if isinstance(info, dict):
        items = {k: v for k, v in info.items()}
    else:
        items = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    out = {k: int(v) for k, v in items.items() if k == "snapshot_scans_served" or k.startswith("snapshot_native_")}
    assert "snapshot_scans_served" in out, f"no snapshot_scans_served in INFO snapshot of :{port}: {items}"
    return out


def set_mode(ports: Sequence[int], mode: str) -> None:
    for p in ports:
        with redis.Redis(host="127.0.0.1", port=p, socket_timeout=10) as c:
            assert c.execute_command("CONFIG", "SET", CONFIG, mode) in (b"OK", True, "OK")


def counter_names(spec: str) -> List[str]:
    """``"scan"`` (any native command's name): served from a snapshot;
    ``"hscan/native"``: routed and answered by the native command (a small
    collection comes back whole at cursor 0)."""
    if spec.endswith("/native"):
        return [f"snapshot_native_{spec[: -len('/native')]}_native"]
    return ["snapshot_scans_served", f"snapshot_native_{spec}_served"]


def wait_grew(ports: Sequence[int], before: Dict[int, Dict[str, int]], spec: str) -> None:
    names = counter_names(spec)
    deadline = time.monotonic() + COUNTER_TIMEOUT
    while True:
        now = {p: counters(p) for p in ports}
        missing = [(p, n) for p in ports for n in names if n not in now[p]]
        assert not missing, f"counters missing from INFO snapshot: {missing}; have {now}"
        if all(now[p][n] > before[p][n] for p in ports for n in names):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"with {CONFIG} on, {names} did not grow on every node: before {before}, now {now}")
        time.sleep(0.01)


def native_then_served(ports: Sequence[int], mode: str, spec: str, run: Callable[[], Any]) -> Tuple[Any, Any]:
    """``run()`` with the mode off, then with ``mode``; checks the counters
    (``spec``: see ``counter_names``)."""
    set_mode(ports, "none")
    try:
        before = {p: counters(p) for p in ports}
        native = run()
        assert {p: counters(p) for p in ports} == before, f"with {CONFIG} none the snapshot counters moved"
        set_mode(ports, mode)
        before = {p: counters(p) for p in ports}
        served = run()
        wait_grew(ports, before, spec)
    finally:
        set_mode(ports, "none")
    return native, served


def bounded(it: Iterable[Any], what: str, limit: int = 200_000, seconds: float = 60.0) -> List[Any]:
    """Everything ``it`` yields; fails past ``limit`` items or ``seconds`` (a client
    looping forever on a cursor that never returns to 0)."""
    out: List[Any] = []
    deadline = time.monotonic() + seconds
    for item in it:
        out.append(item)
        if len(out) > limit or time.monotonic() > deadline:
            raise AssertionError(f"{what}: no end after {len(out)} items")
    return out


def no_repeats(items: List[Any], what: str) -> List[Any]:
    assert len(set(items)) == len(items), f"{what}: an element came back twice"
    return sorted(items)


def load(c: Any, users: int = 200) -> List[bytes]:
    """user:<u>:<n> strings, small and big collections; returns the key names."""
    keys = []
    p = c.pipeline(transaction=False)
    for u in range(users):
        for n in range(10):
            k = f"user:{u}:{n}"
            p.set(k, "v" * (1 + n))
            keys.append(k)
    p.hset("small:hash", mapping={"a": "1", "b": "2", "c": "3"})
    p.sadd("small:set", 1, 2, 3, 4)
    p.zadd("small:zset", {"x": 1, "y": 2.5})
    p.hset("big:hash", mapping={f"f{i}": f"v{i}" for i in range(1000)})
    p.sadd("big:set", *[f"m{i}" for i in range(1000)])
    p.zadd("big:zset", {f"z{i}": i / 4 for i in range(1000)})
    keys += ["small:hash", "small:set", "small:zset", "big:hash", "big:set", "big:zset"]
    p.execute()
    return sorted(k.encode() for k in keys)


def wait_indexed(ports: Sequence[int], total: int) -> None:
    """Waits until the nodes' indexes hold ``total`` keys between them."""
    def indexed() -> int:
        n = 0
        for p in ports:
            with redis.Redis(host="127.0.0.1", port=p, socket_timeout=10, decode_responses=True) as c:
                n += int(info_field(c.execute_command("INFO", "snapshot"), "snapshot_index_keys") or -1)
        return n

    deadline = time.monotonic() + 30
    while indexed() != total:
        if time.monotonic() > deadline:
            raise AssertionError(f"the index does not hold the {total} keys loaded")
        time.sleep(0.01)


@pytest.fixture
def quiet(standalone: Server) -> Iterator[Tuple[redis.Redis, List[bytes]]]:
    c = standalone.client()
    c.flushall()
    keys = load(c)
    wait_indexed([standalone.port], len(keys))
    try:
        yield c, keys
    finally:
        set_mode([standalone.port], "none")
        c.close()


@pytest.mark.parametrize(
    "mode, kw",
    [
        ("all", {}),
        ("scan", {"match": "user:1*"}),
        ("scan keys", {"match": "user:2?:*", "count": 10}),
        ("all", {"count": 1000}),
        ("all", {"match": "big:*", "_type": "hash"}),
    ],
    ids=["plain", "match", "match-count-10", "count-1000", "type-hash"],
)
def test_redis_py_scan_iter(standalone: Server, quiet: Any, mode: str, kw: Dict[str, Any]) -> None:
    c, keys = quiet
    native, served = native_then_served(
        [standalone.port], mode, "scan", lambda: no_repeats(bounded(c.scan_iter(**kw), "scan_iter"), f"scan_iter({kw})")
    )
    assert native, f"scan_iter({kw}) found nothing natively"
    if not kw:
        assert native == keys
    assert served == native, f"scan_iter({kw}) with {CONFIG} {mode}"


@pytest.mark.parametrize(
    "method, key, kw",
    [
        ("hscan_iter", "big:hash", {}),
        ("hscan_iter", "big:hash", {"match": "f1*", "count": 10}),
        ("hscan_iter", "small:hash", {}),
        ("sscan_iter", "big:set", {}),
        ("sscan_iter", "small:set", {"count": 2}),
        ("zscan_iter", "big:zset", {"match": "z9*"}),
        ("zscan_iter", "small:zset", {}),
    ],
    ids=lambda v: str(v) if not isinstance(v, dict) else ",".join(f"{k}={x}" for k, x in v.items()) or "-",
)
@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.usefixtures("quiet")
def test_redis_py_collection_iters(
    standalone: Server, method: str, key: str, kw: Dict[str, Any], protocol: int
) -> None:
    c = standalone.client(protocol=protocol)
    cmd = method.split("_")[0]  # hscan, sscan, zscan
    if key.startswith("small:"):
        cmd += "/native"  # answered whole by the native command at cursor 0

    def run() -> List[Any]:
        return no_repeats(bounded(getattr(c, method)(key, **kw), method), f"{method}({key}, {kw})")

    try:
        native, served = native_then_served([standalone.port], "all", cmd, run)
    finally:
        c.close()
    assert native, f"{method}({key}, {kw}) found nothing natively"
    assert served == native, f"{method}({key}, {kw}) with {CONFIG} all"


@pytest.mark.parametrize("kw", [{}, {"match": "user:1*", "count": 100}], ids=["plain", "match-count-100"])
def test_redis_cluster_scan_iter(cluster: Cluster, kw: Dict[str, Any]) -> None:
    """redis-py's RedisCluster runs one SCAN loop per primary: every node serves
    its own from snapshots."""
    ports = cluster.ports
    rc = redis.cluster.RedisCluster(host="127.0.0.1", port=ports[0])
    try:
        for p in ports:
            with redis.Redis(host="127.0.0.1", port=p, socket_timeout=10) as c:
                c.flushall()
        # Keys spread over every node's slots.
        for u in range(300):
            rc.set(f"user:{u}", u)
        wait_indexed(ports, 300)
        native, served = native_then_served(
            ports, "all", "scan", lambda: no_repeats(bounded(rc.scan_iter(**kw), "RedisCluster.scan_iter"), f"RedisCluster.scan_iter({kw})")
        )
        if not kw:
            assert native == sorted(f"user:{u}".encode() for u in range(300))
        assert native
        assert served == native, f"RedisCluster.scan_iter({kw}) with {CONFIG} all"
    finally:
        rc.close()


# ---------------------------------------------------------------- django-redis ----
@pytest.fixture(scope="module")
def django_configured() -> None:
    import django  # installed by scripts/install-deps.sh: a missing one fails the test
    from django.conf import settings

    if not settings.configured:
        # The minimal settings django-redis needs: caches are made below, per server.
        settings.configure(USE_TZ=True, CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}})
        django.setup()


def django_cache(port: int) -> Any:
    from django_redis.cache import RedisCache

    return RedisCache(f"redis://127.0.0.1:{port}/0", {"KEY_PREFIX": "app", "OPTIONS": {"SOCKET_TIMEOUT": 10}})


@pytest.mark.parametrize("itersize", [None, 1000], ids=["default-itersize", "itersize-1000"])
def test_django_redis_delete_pattern(standalone: Server, django_configured: None, itersize: Any) -> None:
    """``cache.delete_pattern`` (scan_iter with COUNT itersize, then DEL) deletes
    the same keys with the mode on as natively, and leaves the same others."""
    c = standalone.client()
    cache = django_cache(standalone.port)

    def fill() -> None:
        c.flushall()
        cache.set_many({f"session:{u}:{n}": n for u in range(150) for n in range(4)}, timeout=None)
        cache.set_many({f"profile:{u}": u for u in range(200)}, timeout=None)
        wait_indexed([standalone.port], 800)

    def run() -> Tuple[int, List[bytes]]:
        fill()
        kw = {} if itersize is None else {"itersize": itersize}
        deleted = cache.delete_pattern("session:1*", **kw)
        return deleted, sorted(c.keys("*"))  # the mode is "scan": KEYS stays native

    try:
        (n_native, left_native), (n_served, left_served) = native_then_served([standalone.port], "scan", "scan", run)
    finally:
        c.close()
    # session:1, 10-19, 100-149: 61 users x 4 keys.
    assert n_native == 61 * 4, n_native
    assert len(left_native) == 800 - 61 * 4
    assert (n_served, left_served) == (n_native, left_native), f"delete_pattern with {CONFIG} scan"


# ------------------------------------------------- MULTI, Lua, ACL with redis-py ----
def is_redis_70(c: redis.Redis) -> bool:
    info = c.info("server")
    return "valkey_version" not in info and str(info["redis_version"]).startswith("7.0.")


def test_redis_py_transaction_and_script_scan_exactly_as_native(standalone: Server, quiet: Any) -> None:
    """Contract 4 through redis-py: SCAN queued in a MULTI pipeline and called by a
    Lua script gives the native reply, cursor included, and serves nothing from a
    snapshot."""
    c, _ = quiet
    script = "return redis.call('SCAN', ARGV[1], 'COUNT', '1000')"

    def run() -> Any:
        p = c.pipeline(transaction=True)
        p.scan(0, count=1000)
        p.scan(0, match="user:1*", count=1000)
        return p.execute(), c.eval(script, 0, 0)

    set_mode([standalone.port], "none")
    native = run()
    set_mode([standalone.port], "all")
    try:
        before = counters(standalone.port)
        served = run()
        after = counters(standalone.port)
    finally:
        set_mode([standalone.port], "none")
    assert served == native, "SCAN in MULTI / Lua with the mode on is not the native reply"
    moved = {k: (before[k], after[k]) for k in before if k.endswith("_served") and after[k] != before[k]}
    assert not moved, f"SCAN in MULTI / Lua was served from a snapshot: {moved}"


def test_redis_py_acl_user_with_categories(standalone: Server, quiet: Any) -> None:
    """Contract 5 through redis-py: a user allowed SCAN through its categories and
    denied SNAPSHOT.SCAN is served from snapshots with the native key set (on
    Redis 7.0, whose filters cannot tell the client, it gets the documented
    NOPERM for snapshot.native-scan instead)."""
    c, keys = quiet
    c.execute_command(
        "ACL", "SETUSER", "scanner", "reset", "on", ">pw", "~*", "+@keyspace", "+@read", "+@connection", "-snapshot.scan"
    )
    u = redis.Redis(host="127.0.0.1", port=standalone.port, username="scanner", password="pw", socket_timeout=10)
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            u.execute_command("SNAPSHOT.SCAN", 0)
        if is_redis_70(c):
            set_mode([standalone.port], "scan")
            try:
                with pytest.raises(redis.exceptions.NoPermissionError, match="snapshot.native-scan"):
                    list(u.scan_iter())
            finally:
                set_mode([standalone.port], "none")
            return
        native, served = native_then_served(
            [standalone.port], "scan", "scan", lambda: no_repeats(bounded(u.scan_iter(), "scan_iter"), "scan_iter")
        )
        assert native == keys
        assert served == native, f"scan_iter as a user with +@keyspace +@read, {CONFIG} scan"
    finally:
        u.close()
        c.execute_command("ACL", "DELUSER", "scanner")
