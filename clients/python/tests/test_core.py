"""Pure parts, no server: glob prefixes and hash tags, error mapping, the LOADING
retry loop against a fake client, the sync/async guards, packaging."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, List

import pytest
import redis.exceptions
import valkey.exceptions

import snapscan
import snapscan.asyncio
from snapscan import _core


@pytest.mark.parametrize(
    "pattern, prefix",
    [
        (b"user:42:*", b"user:42:"),
        (b"*", b""),
        (b"", b""),
        (b"abc", b"abc"),
        (b"a?c", b"a"),
        (b"a[bc]d", b"a"),
        (b"a\\*b*", b"a*b"),
        (b"a\\\\b*", b"a\\b"),
        (b"trailing\\", b"trailing\\"),
    ],
)
def test_literal_prefix(pattern: bytes, prefix: bytes) -> None:
    assert _core.literal_prefix(pattern) == prefix


@pytest.mark.parametrize(
    "pattern, tag",
    [
        ("{user:42}:*", b"user:42"),
        (b"{user:42}:*", b"user:42"),
        ("x{t}*", b"t"),
        ("{t}", b"t"),
        ("{{t}*", b"{t"),  # the first "{" opens the tag
        ("\\{t}:*", b"t"),  # an escaped brace is still a brace in the key
        ("{}*", None),  # empty tag: the whole key is hashed
        ("{t*}", None),  # tag not complete within the literal prefix
        ("{t", None),
        ("user:*", None),
        ("*{t}", None),
        (None, None),
        ("{é}:*", "é".encode()),
    ],
)
def test_pattern_hashtag(pattern: Any, tag: Any) -> None:
    assert _core.pattern_hashtag(pattern) == tag


@pytest.mark.parametrize("exc_mod", [redis.exceptions, valkey.exceptions], ids=["redis", "valkey"])
def test_error_classification(exc_mod: Any) -> None:
    assert _core.is_loading(exc_mod.BusyLoadingError("snapscan is building its index: 5% (1 of 20 keys)"))
    assert _core.is_loading(exc_mod.ResponseError("LOADING Redis is loading the dataset in memory"))
    assert not _core.is_loading(exc_mod.ResponseError("ERR syntax error"))
    msg = "cursor 123 is unknown, already used or expired; restart the scan from cursor 0"
    e = _core.cursor_expired(exc_mod.ResponseError(msg), ["SNAPSHOT.SCAN", 123], "127.0.0.1:7000")
    assert isinstance(e, snapscan.SnapshotCursorExpired) and isinstance(e, snapscan.SnapscanError)
    assert (e.cursor, e.command, e.node, str(e)) == (123, "SNAPSHOT.SCAN", "127.0.0.1:7000", msg)
    assert _core.cursor_expired(exc_mod.ResponseError("ERR invalid cursor"), ["SNAPSHOT.SCAN"], None) is None
    assert _core.cursor_expired(exc_mod.ConnectionError(msg), ["SNAPSHOT.SCAN"], None) is None


def test_backoff_grows_and_respects_the_deadline() -> None:
    b = _core.Backoff(0.3)
    delays = []
    while (d := b.next_delay()) is not None and len(delays) < 100:
        delays.append(d)
        time.sleep(d)
    assert 3 <= len(delays) < 100
    assert all(d <= 0.5 for d in delays)
    assert max(delays) > 2 * min(delays)
    assert _core.Backoff(0).next_delay() is None


class FakeClient:
    """Answers LOADING ``loading`` times, then a 2-page SNAPSHOT.SCAN; records calls."""

    def __init__(self, exc_mod: Any, loading: int, error: Exception | None = None) -> None:
        self.exc_mod, self.loading, self.error = exc_mod, loading, error
        self.calls: List[tuple] = []

    def reply(self, *args: Any) -> Any:
        self.calls.append(args)
        if self.loading > 0:
            self.loading -= 1
            raise self.exc_mod.BusyLoadingError("snapscan is building its index: 50% (5 of 10 keys); retry shortly")
        if self.error is not None:
            raise self.error
        if args[1] == 0:
            return [b"7", [b"a", b"b"]]
        return [b"0", [b"c"]]

    def execute_command(self, *args: Any, **kw: Any) -> Any:
        return self.reply(*args)


class AsyncFakeClient(FakeClient):
    async def execute_command(self, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        return self.reply(*args)


@pytest.mark.parametrize("exc_mod", [redis.exceptions, valkey.exceptions], ids=["redis", "valkey"])
def test_loading_is_retried_then_raised_at_the_deadline(exc_mod: Any) -> None:
    fake = FakeClient(exc_mod, loading=2)
    assert list(snapscan.snapshot_scan_iter(fake, match="*", count=2)) == [b"a", b"b", b"c"]
    assert [c[:2] for c in fake.calls] == [("SNAPSHOT.SCAN", 0)] * 3 + [("SNAPSHOT.SCAN", 7)]
    assert fake.calls[0] == ("SNAPSHOT.SCAN", 0, "MATCH", "*", "COUNT", 2)

    forever = FakeClient(exc_mod, loading=10**9)
    start = time.monotonic()
    with pytest.raises(exc_mod.BusyLoadingError):
        list(snapscan.snapshot_scan_iter(forever, loading_timeout=0.2))
    assert 0.2 <= time.monotonic() - start < 2
    assert 2 <= len(forever.calls) < 50

    fake = AsyncFakeClient(exc_mod, loading=2)

    async def go() -> List[Any]:
        return [k async for k in snapscan.asyncio.snapshot_scan_iter(fake)]

    assert asyncio.run(go()) == [b"a", b"b", b"c"]
    assert len(fake.calls) == 4


@pytest.mark.parametrize("exc_mod", [redis.exceptions, valkey.exceptions], ids=["redis", "valkey"])
def test_other_errors_propagate_unchanged(exc_mod: Any) -> None:
    err = exc_mod.ResponseError("unknown command 'SNAPSHOT.SCAN', with args beginning with: '0'")
    fake = FakeClient(exc_mod, loading=0, error=err)
    with pytest.raises(exc_mod.ResponseError) as info:
        list(snapscan.snapshot_scan_iter(fake))
    assert info.value is err
    assert len(fake.calls) == 1


def test_sync_and_async_functions_refuse_the_other_kind() -> None:
    with pytest.raises(TypeError, match="snapscan.asyncio"):
        next(snapscan.snapshot_scan_iter(AsyncFakeClient(redis.exceptions, 0)))

    async def go() -> None:
        async for _ in snapscan.asyncio.snapshot_scan_iter(FakeClient(redis.exceptions, 0)):
            pass

    with pytest.raises(TypeError, match="not an asyncio client"):
        asyncio.run(go())


def test_package_is_typed() -> None:
    assert (Path(snapscan.__file__).parent / "py.typed").is_file()


class Recorder:
    """A standalone or cluster client that answers canned replies and records
    ``(args, target node)`` of every call."""

    def __init__(self, replies: List[Any], cluster: bool = False) -> None:
        self.replies = list(replies)
        self.calls: List[tuple] = []
        if cluster:
            self.get_primaries = lambda: ["n1", "n2", "n3"]
            self.get_node_from_key = lambda key: f"owner-of-{key!r}"

    def execute_command(self, *args: Any, **kw: Any) -> Any:
        self.calls.append((args, kw.get("target_nodes")))
        return self.replies.pop(0)


def test_key_commands_build_their_arguments_and_parse_their_replies() -> None:
    r = Recorder([[b"5", [b"m1", b"1.5", b"m2", b"2"]], [b"0", [b"m3", b"-inf"]]])
    assert list(snapscan.snapshot_zscan_iter(r, "z", match="m*", count=2)) == [
        (b"m1", 1.5),
        (b"m2", 2.0),
        (b"m3", float("-inf")),
    ]
    assert [c[0] for c in r.calls] == [
        ("SNAPSHOT.ZSCAN", "z", 0, "MATCH", "m*", "COUNT", 2),
        ("SNAPSHOT.ZSCAN", "z", 5, "MATCH", "m*", "COUNT", 2),
    ]
    r = Recorder([[b"0", [b"m1", b"m2"]]])
    assert list(snapscan.snapshot_zscan_iter(r, "z", no_scores=True)) == [b"m1", b"m2"]
    assert r.calls[0][0] == ("SNAPSHOT.ZSCAN", "z", 0, "NOSCORES")
    r = Recorder([[b"0", [b"a", b"b"]]])
    assert list(snapscan.snapshot_sscan_iter(r, b"s", count=9)) == [b"a", b"b"]
    assert r.calls[0][0] == ("SNAPSHOT.SSCAN", b"s", 0, "COUNT", 9)
    r = Recorder([[b"0", [b"f", b"v", b"g", b"w"]]])
    assert list(snapscan.snapshot_hscan_iter(r, "h")) == [(b"f", b"v"), (b"g", b"w")]
    r = Recorder([[b"0", [b"f", b"g"]]])
    assert list(snapscan.snapshot_hscan_iter(r, "h", no_values=True)) == [b"f", b"g"]
    assert r.calls[0][0] == ("SNAPSHOT.HSCAN", "h", 0, "NOVALUES")
    assert all(target is None for _, target in r.calls)


def test_cluster_routing_with_a_fake_cluster() -> None:
    # SCAN: every primary in turn, each iteration to its end on its own node.
    r = Recorder([[b"4", [b"a"]], [b"0", [b"b"]], [b"0", []], [b"0", [b"c"]]], cluster=True)
    assert list(snapscan.snapshot_scan_iter(r, match="user:*")) == [b"a", b"b", b"c"]
    assert [(c[0][1], c[1]) for c in r.calls] == [(0, "n1"), (4, "n1"), (0, "n2"), (0, "n3")]
    # A hash tag in the literal prefix: its owner only.
    r = Recorder([[b"0", [b"{t}:1"]]], cluster=True)
    assert list(snapscan.snapshot_scan_iter(r, match="{t}:*")) == [b"{t}:1"]
    assert [c[1] for c in r.calls] == ["owner-of-b't'"]
    # Key commands: the key's owner.
    r = Recorder([[b"0", [b"a"]]], cluster=True)
    list(snapscan.snapshot_sscan_iter(r, "k"))
    assert r.calls[0][1] == "owner-of-'k'"
    # UNLINK: summed over the primaries; DRYRUN and TYPE passed on.
    r = Recorder([3, 0, 4], cluster=True)
    assert snapscan.unlink_matching(r, "x:*", _type="hash", dry_run=True) == 7
    assert [c[0] for c in r.calls] == [("SNAPSHOT.UNLINK", "x:*", "TYPE", "hash", "DRYRUN")] * 3
    r = Recorder([5], cluster=True)
    assert snapscan.unlink_matching(r, "{t}x*") == 5
    assert r.calls == [(("SNAPSHOT.UNLINK", "{t}x*"), "owner-of-b't'")]
