"""The iterators against real servers, for every client: redis-py and valkey-py,
sync and asyncio, standalone and a 3-node cluster."""

from __future__ import annotations

from typing import Any, Dict

import pytest

from conftest import Env, is_unknown_command


def populate(env: Env, n: int = 300) -> Dict[str, str]:
    """``n`` strings ``user:<i>``, n/10 hashes ``h:<i>``, 30 keys ``{grp}:<i>`` (one slot),
    ``other`` keys; returns name -> type."""
    keys: Dict[str, str] = {}
    c = env.raw()
    for i in range(n):
        c.set(f"user:{i}", i)
        keys[f"user:{i}"] = "string"
    for i in range(n // 10):
        c.hset(f"h:{i}", "f", i)
        keys[f"h:{i}"] = "hash"
    for i in range(30):
        c.set(f"{{grp}}:{i}", i)
        keys[f"{{grp}}:{i}"] = "string"
    c.sadd("other:set", "a")
    keys["other:set"] = "set"
    c.close()
    return keys


def test_scan_returns_every_key_once(env: Env) -> None:
    keys = populate(env)
    got = env.collect("snapshot_scan_iter", count=50, client_kw={"decode_responses": True})
    assert len(got) == len(set(got)), "a key came back twice"
    assert set(got) == set(keys)
    # Standalone: byte order. Cluster: byte order within each node's run.
    if not env.is_cluster:
        assert got == sorted(got)


def test_scan_match_and_type(env: Env) -> None:
    keys = populate(env)
    got = env.collect("snapshot_scan_iter", match="user:1*", count=7)
    assert sorted(got) == sorted(k.encode() for k in keys if k.startswith("user:1"))
    got = env.collect("snapshot_scan_iter", _type="hash", client_kw={"decode_responses": True})
    assert sorted(got) == sorted(k for k, t in keys.items() if t == "hash")
    got = env.collect("snapshot_scan_iter", match=b"h:*", _type="string")
    assert got == []


def test_scan_sees_the_keyspace_of_its_first_call(env: Env) -> None:
    keys = populate(env, 100)
    raw = env.raw()

    def write_meanwhile() -> None:
        for i in range(100):
            raw.delete(f"user:{i}")
            raw.set(f"new:{i}", i)

    got = env.collect(
        "snapshot_scan_iter", count=10, after_first=write_meanwhile, client_kw={"decode_responses": True}
    )
    raw.close()
    if env.is_cluster:
        # Each node's snapshot is taken by its own first call: the node scanned
        # first is exact at the start; later nodes were snapshotted after the
        # writes. Every surviving key and every key of the first node is there once.
        assert len(got) == len(set(got))
        assert {k for k in keys if not k.startswith("user:")} <= set(got)
        assert set(got) <= set(keys) | {f"new:{i}" for i in range(100)}
    else:
        assert set(got) == set(keys)


def test_cluster_hashtag_pattern_asks_one_node(cluster_env: Env) -> None:
    env = cluster_env
    populate(env)
    before = env.scans_served()
    got = env.collect("snapshot_scan_iter", match="{grp}:*", count=1000, client_kw={"decode_responses": True})
    after = env.scans_served()
    assert sorted(got) == sorted(f"{{grp}}:{i}" for i in range(30))
    asked = [p for p in env.ports if after[p] > before[p]]
    raw = env.raw()
    owner = raw.get_node_from_key("{grp}").port
    raw.close()
    assert asked == [owner]
    # Without a tag every primary is asked.
    before = env.scans_served()
    env.collect("snapshot_scan_iter", match="user:*", count=1000)
    after = env.scans_served()
    assert all(after[p] > before[p] for p in env.ports)


def test_hscan_pairs_and_fields(env: Env) -> None:
    raw = env.raw()
    fields = {f"f{i:03}": f"v{i}" for i in range(250)}
    raw.hset("hash{x}", mapping=fields)
    raw.set("str{x}", "s")
    raw.close()
    kw: Dict[str, Any] = {"client_kw": {"decode_responses": True}}
    got = env.collect("snapshot_hscan_iter", "hash{x}", count=40, **kw)
    assert got == sorted(fields.items())
    got = env.collect("snapshot_hscan_iter", "hash{x}", match="f1*", no_values=True, **kw)
    assert got == sorted(f for f in fields if f.startswith("f1"))
    assert env.collect("snapshot_hscan_iter", "missing{x}", **kw) == []
    with pytest.raises(Exception, match="WRONGTYPE"):
        env.collect("snapshot_hscan_iter", "str{x}")


def test_hscan_snapshot_ignores_later_writes(env: Env) -> None:
    raw = env.raw()
    raw.hset("h", mapping={f"f{i:03}": i for i in range(100)})

    def write_meanwhile() -> None:
        raw.hdel("h", *[f"f{i:03}" for i in range(50, 100)])
        raw.hset("h", "zz", "new")

    got = env.collect("snapshot_hscan_iter", "h", count=10, no_values=True, after_first=write_meanwhile)
    raw.close()
    assert got == [f"f{i:03}".encode() for i in range(100)]


def test_sscan(env: Env) -> None:
    raw = env.raw()
    members = {f"m{i:03}" for i in range(120)}
    raw.sadd("set{s}", *members)
    raw.close()
    try:
        got = env.collect("snapshot_sscan_iter", "set{s}", count=25, client_kw={"decode_responses": True})
    except Exception as e:
        if is_unknown_command(e):
            pytest.skip("this module has no SNAPSHOT.SSCAN")
        raise
    assert len(got) == len(members) and set(got) == members
    got = env.collect("snapshot_sscan_iter", "set{s}", match="m01*", client_kw={"decode_responses": True})
    assert sorted(got) == sorted(m for m in members if m.startswith("m01"))
    assert env.collect("snapshot_sscan_iter", "missing{s}") == []


def test_zscan(env: Env) -> None:
    raw = env.raw()
    scores = {f"z{i:03}": i * 1.5 for i in range(120)}
    raw.zadd("zset{z}", scores)
    raw.close()
    try:
        got = env.collect("snapshot_zscan_iter", "zset{z}", count=25, client_kw={"decode_responses": True})
    except Exception as e:
        if is_unknown_command(e):
            pytest.skip("this module has no SNAPSHOT.ZSCAN")
        raise
    assert len(got) == len(scores) and dict(got) == scores
    assert all(isinstance(s, float) for _, s in got)
    got = env.collect(
        "snapshot_zscan_iter", "zset{z}", match="z00*", no_scores=True, client_kw={"decode_responses": True}
    )
    assert sorted(got) == sorted(m for m in scores if m.startswith("z00"))
    got = env.collect("snapshot_zscan_iter", "zset{z}", match="z001", score_cast_func=lambda s: float(s) * 2)
    assert got == [(b"z001", 3.0)]


def test_unlink_matching(env: Env) -> None:
    keys = populate(env)
    users = sum(1 for k in keys if k.startswith("user:"))
    try:
        n = env.call("unlink_matching", "user:*", dry_run=True)
    except Exception as e:
        if is_unknown_command(e):
            pytest.skip("this module has no SNAPSHOT.UNLINK")
        raise
    assert n == users
    raw = env.raw()
    assert raw.exists("user:0", "user:1") == 2
    assert env.call("unlink_matching", "*", _type="hash") == sum(1 for t in keys.values() if t == "hash")
    assert env.call("unlink_matching", "{grp}:*") == 30
    assert env.call("unlink_matching", "user:*") == users
    assert env.call("unlink_matching", "user:*") == 0
    left = env.collect("snapshot_scan_iter", client_kw={"decode_responses": True})
    raw.close()
    assert left == ["other:set"]


def test_scan_iterates_the_clients_database(standalone_env: Env) -> None:
    env = standalone_env
    db0 = env.raw()
    db0.set("in-db0", 0)
    db0.close()
    db1 = env.raw(db=1)
    db1.mset({"in-db1-a": 1, "in-db1-b": 2})
    db1.close()
    got = env.collect("snapshot_scan_iter", client_kw={"db": 1, "decode_responses": True})
    assert got == ["in-db1-a", "in-db1-b"]
    assert env.collect("snapshot_scan_iter", client_kw={"decode_responses": True}) == ["in-db0"]
