"""Iterators for synchronous redis-py / valkey-py clients, standalone and cluster."""

from __future__ import annotations

import inspect
import time
from typing import Any, Callable, Iterator, List, Literal, Optional, Protocol, Sequence, Tuple, Union, overload

from . import _core
from ._core import DEFAULT_LOADING_TIMEOUT, EncodedT, PatternT


class SyncClient(Protocol):
    """Anything with redis-py's ``execute_command``: ``redis.Redis``,
    ``redis.cluster.RedisCluster``, ``valkey.Valkey``, ``valkey.cluster.ValkeyCluster``."""

    def execute_command(self, *args: Any, **options: Any) -> Any: ...


def _check(client: Any) -> None:
    if inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
        raise TypeError("an asyncio client: use the functions of snapscan.asyncio")


def _call(client: Any, args: List[Any], node: Any, loading_timeout: float) -> Any:
    """One command; ``LOADING`` retried with backoff until ``loading_timeout`` s have
    passed (then that error is raised), an expired cursor raised as
    :class:`SnapshotCursorExpired`, any other error unchanged."""
    backoff = _core.Backoff(loading_timeout)
    while True:
        try:
            if node is None:
                return client.execute_command(*args)
            return client.execute_command(*args, target_nodes=node)
        except Exception as e:
            if _core.is_loading(e):
                delay = backoff.next_delay()
                if delay is None:
                    raise
                _core.log.debug("%s: LOADING (%s); retrying in %.3f s", args[0], e, delay)
                time.sleep(delay)
                continue
            expired = _core.cursor_expired(e, args, _core.node_name(node))
            if expired is not None:
                raise expired from e
            raise


def _pages(
    client: Any, make_args: Callable[[int], List[Any]], node: Any, loading_timeout: float
) -> Iterator[Sequence[Any]]:
    cursor = 0
    while True:
        cursor, items = _core.parse_page(_call(client, make_args(cursor), node, loading_timeout))
        yield items
        if cursor == 0:
            return


def _scan_targets(client: Any, pattern: Optional[PatternT]) -> List[Any]:
    """``[None]`` for a standalone client; for a cluster the primary owning the
    pattern's hash tag, else every primary."""
    if not _core.is_cluster(client):
        return [None]
    tag = _core.pattern_hashtag(pattern)
    if tag is not None:
        return [client.get_node_from_key(tag)]
    return list(client.get_primaries())


def _key_target(client: Any, key: PatternT) -> Any:
    return client.get_node_from_key(key) if _core.is_cluster(client) else None


def snapshot_scan_iter(
    client: SyncClient,
    match: Optional[PatternT] = None,
    count: Optional[int] = None,
    _type: Optional[PatternT] = None,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> Iterator[EncodedT]:
    """Iterates over the keys of the client's database with ``SNAPSHOT.SCAN``, like
    redis-py's ``scan_iter``: every key that existed (and matches ``match`` and
    ``_type``) at the instant of the first call, each exactly once, in byte order.

    ``count`` is the most keys one call returns (server default 10).

    Cluster clients: one snapshot iteration per primary, one after the other; each
    is exact for its node at its own instant, and there is **no cluster-wide
    instant** (a key moved between nodes meanwhile can be missed or seen twice).
    A ``match`` whose literal prefix holds a complete hash tag (``{user:42}:*``)
    only asks the primary owning that tag's slot.

    ``LOADING`` replies (the server loading its data, or snapscan building its index
    after ``MODULE LOAD``) are retried with backoff for up to ``loading_timeout``
    seconds per call, then raised. A cursor the server no longer knows (idle past
    ``snapshot.cursor-idle-timeout``, evicted, server restarted) raises
    :class:`~snapscan.SnapshotCursorExpired`. Other errors propagate.
    """
    _check(client)
    for node in _scan_targets(client, match):
        for items in _pages(
            client, lambda c: _core.scan_args(c, match, count, _type), node, loading_timeout
        ):
            yield from items


@overload
def snapshot_hscan_iter(
    client: SyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    no_values: Literal[False] = ...,
    *,
    loading_timeout: float = ...,
) -> Iterator[Tuple[EncodedT, EncodedT]]: ...
@overload
def snapshot_hscan_iter(
    client: SyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    *,
    no_values: Literal[True],
    loading_timeout: float = ...,
) -> Iterator[EncodedT]: ...
@overload
def snapshot_hscan_iter(
    client: SyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    no_values: bool = ...,
    *,
    loading_timeout: float = ...,
) -> Iterator[Union[EncodedT, Tuple[EncodedT, EncodedT]]]: ...
def snapshot_hscan_iter(
    client: SyncClient,
    key: PatternT,
    match: Optional[PatternT] = None,
    count: Optional[int] = None,
    no_values: bool = False,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> Iterator[Any]:
    """Iterates over hash ``key`` with ``SNAPSHOT.HSCAN``: ``(field, value)`` pairs,
    or fields only with ``no_values=True``, exactly as the hash was at the first
    call, each field once, in byte order of the field. A missing key yields nothing.

    Cluster clients send every call to the primary owning ``key``'s slot. Errors as
    for :func:`snapshot_scan_iter` (``WRONGTYPE`` propagates).
    """
    _check(client)
    flag = "NOVALUES" if no_values else None
    node = _key_target(client, key)
    for items in _pages(
        client,
        lambda c: _core.key_scan_args("SNAPSHOT.HSCAN", key, c, match, count, flag),
        node,
        loading_timeout,
    ):
        if no_values:
            yield from items
        else:
            yield from _core.pairs(items)


def snapshot_sscan_iter(
    client: SyncClient,
    key: PatternT,
    match: Optional[PatternT] = None,
    count: Optional[int] = None,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> Iterator[EncodedT]:
    """Iterates over the members of set ``key`` with ``SNAPSHOT.SSCAN``, as the set
    was at the first call, each once. Routing and errors as for
    :func:`snapshot_hscan_iter`."""
    _check(client)
    node = _key_target(client, key)
    for items in _pages(
        client,
        lambda c: _core.key_scan_args("SNAPSHOT.SSCAN", key, c, match, count, None),
        node,
        loading_timeout,
    ):
        yield from items


@overload
def snapshot_zscan_iter(
    client: SyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    no_scores: Literal[False] = ...,
    score_cast_func: Callable[[Any], Any] = ...,
    *,
    loading_timeout: float = ...,
) -> Iterator[Tuple[EncodedT, Any]]: ...
@overload
def snapshot_zscan_iter(
    client: SyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    *,
    no_scores: Literal[True],
    score_cast_func: Callable[[Any], Any] = ...,
    loading_timeout: float = ...,
) -> Iterator[EncodedT]: ...
@overload
def snapshot_zscan_iter(
    client: SyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    no_scores: bool = ...,
    score_cast_func: Callable[[Any], Any] = ...,
    *,
    loading_timeout: float = ...,
) -> Iterator[Union[EncodedT, Tuple[EncodedT, Any]]]: ...
def snapshot_zscan_iter(
    client: SyncClient,
    key: PatternT,
    match: Optional[PatternT] = None,
    count: Optional[int] = None,
    no_scores: bool = False,
    score_cast_func: Callable[[Any], Any] = float,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> Iterator[Any]:
    """Iterates over sorted set ``key`` with ``SNAPSHOT.ZSCAN``: ``(member, score)``
    pairs (score through ``score_cast_func``, ``float`` by default, as redis-py's
    ``zscan_iter``), or members only with ``no_scores=True``, as the sorted set was
    at the first call, each once. Routing and errors as for
    :func:`snapshot_hscan_iter`."""
    _check(client)
    flag = "NOSCORES" if no_scores else None
    node = _key_target(client, key)
    for items in _pages(
        client,
        lambda c: _core.key_scan_args("SNAPSHOT.ZSCAN", key, c, match, count, flag),
        node,
        loading_timeout,
    ):
        if no_scores:
            yield from items
        else:
            for member, score in _core.pairs(items):
                yield member, score_cast_func(score)


def unlink_matching(
    client: SyncClient,
    pattern: PatternT,
    _type: Optional[PatternT] = None,
    dry_run: bool = False,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> int:
    """``SNAPSHOT.UNLINK pattern [TYPE type] [DRYRUN]``: unlinks the keys matching
    ``pattern`` (and ``_type``) and returns how many; with ``dry_run=True`` only
    counts them.

    Cluster clients: sent to every primary (or only to the one owning the pattern's
    hash tag, as :func:`snapshot_scan_iter`) and the counts added up; each node
    works from its own snapshot, there is no cluster-wide instant. If a node fails,
    its error propagates and the nodes asked before it have already unlinked theirs.
    ``LOADING`` is retried as in :func:`snapshot_scan_iter`; other errors propagate.
    """
    _check(client)
    total = 0
    for node in _scan_targets(client, pattern):
        total += int(_call(client, _core.unlink_args(pattern, _type, dry_run), node, loading_timeout))
    return total
