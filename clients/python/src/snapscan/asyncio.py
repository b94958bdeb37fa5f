"""The same iterators for asyncio clients (``redis.asyncio``, ``valkey.asyncio``,
standalone and cluster): use them with ``async for`` and ``await``.

    from snapscan.asyncio import snapshot_scan_iter
    async for key in snapshot_scan_iter(client, match="user:*"):
        ...

Semantics, routing and errors are those of the synchronous functions in
:mod:`snapscan`.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    List,
    Literal,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Union,
    overload,
)

from . import _core
from ._core import DEFAULT_LOADING_TIMEOUT, EncodedT, PatternT

__all__ = [
    "AsyncClient",
    "snapshot_scan_iter",
    "snapshot_hscan_iter",
    "snapshot_sscan_iter",
    "snapshot_zscan_iter",
    "unlink_matching",
]


class AsyncClient(Protocol):
    """Anything with an awaitable ``execute_command``: ``redis.asyncio.Redis``,
    ``redis.asyncio.cluster.RedisCluster``, ``valkey.asyncio.Valkey``,
    ``valkey.asyncio.cluster.ValkeyCluster``."""

    def execute_command(self, *args: Any, **options: Any) -> Awaitable[Any]: ...


def _check(client: Any) -> None:
    if not inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
        raise TypeError("not an asyncio client: use the functions of snapscan")


async def _call(client: Any, args: List[Any], node: Any, loading_timeout: float) -> Any:
    backoff = _core.Backoff(loading_timeout)
    while True:
        try:
            if node is None:
                return await client.execute_command(*args)
            return await client.execute_command(*args, target_nodes=node)
        except Exception as e:
            if _core.is_loading(e):
                delay = backoff.next_delay()
                if delay is None:
                    raise
                _core.log.debug("%s: LOADING (%s); retrying in %.3f s", args[0], e, delay)
                await asyncio.sleep(delay)
                continue
            expired = _core.cursor_expired(e, args, _core.node_name(node))
            if expired is not None:
                raise expired from e
            raise


async def _pages(
    client: Any, make_args: Callable[[int], List[Any]], node: Any, loading_timeout: float
) -> AsyncIterator[Sequence[Any]]:
    cursor = 0
    while True:
        cursor, items = _core.parse_page(await _call(client, make_args(cursor), node, loading_timeout))
        yield items
        if cursor == 0:
            return


async def _init_cluster(client: Any) -> bool:
    """True for a cluster client, initialised (it learns its nodes on first use)."""
    if not _core.is_cluster(client):
        return False
    init = getattr(client, "initialize", None)
    if init is not None:
        await init()
    return True


async def _scan_targets(client: Any, pattern: Optional[PatternT]) -> List[Any]:
    if not await _init_cluster(client):
        return [None]
    tag = _core.pattern_hashtag(pattern)
    if tag is not None:
        return [client.get_node_from_key(tag)]
    return list(client.get_primaries())


async def _key_target(client: Any, key: PatternT) -> Any:
    return client.get_node_from_key(key) if await _init_cluster(client) else None


async def snapshot_scan_iter(
    client: AsyncClient,
    match: Optional[PatternT] = None,
    count: Optional[int] = None,
    _type: Optional[PatternT] = None,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> AsyncIterator[EncodedT]:
    """``async for`` over the keys of the client's database with ``SNAPSHOT.SCAN``:
    every key that existed (and matches) at the instant of the first call, each once.

    Cluster clients: one snapshot iteration per primary, one after the other; each
    is exact for its node at its own instant, and there is **no cluster-wide
    instant**. A ``match`` whose literal prefix holds a complete hash tag only asks
    the primary owning that tag's slot. ``LOADING`` is retried for up to
    ``loading_timeout`` s per call; an unknown/expired cursor raises
    :class:`~snapscan.SnapshotCursorExpired`; other errors propagate.
    See :func:`snapscan.snapshot_scan_iter`.
    """
    _check(client)
    for node in await _scan_targets(client, match):
        async for items in _pages(
            client, lambda c: _core.scan_args(c, match, count, _type), node, loading_timeout
        ):
            for item in items:
                yield item


@overload
def snapshot_hscan_iter(
    client: AsyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    no_values: Literal[False] = ...,
    *,
    loading_timeout: float = ...,
) -> AsyncIterator[Tuple[EncodedT, EncodedT]]: ...
@overload
def snapshot_hscan_iter(
    client: AsyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    *,
    no_values: Literal[True],
    loading_timeout: float = ...,
) -> AsyncIterator[EncodedT]: ...
@overload
def snapshot_hscan_iter(
    client: AsyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    no_values: bool = ...,
    *,
    loading_timeout: float = ...,
) -> AsyncIterator[Union[EncodedT, Tuple[EncodedT, EncodedT]]]: ...
async def snapshot_hscan_iter(
    client: AsyncClient,
    key: PatternT,
    match: Optional[PatternT] = None,
    count: Optional[int] = None,
    no_values: bool = False,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> AsyncIterator[Any]:
    """``async for`` over hash ``key`` with ``SNAPSHOT.HSCAN``: ``(field, value)``
    pairs, or fields with ``no_values=True``, as the hash was at the first call.
    Cluster clients route by ``key``. See :func:`snapscan.snapshot_hscan_iter`."""
    _check(client)
    flag = "NOVALUES" if no_values else None
    node = await _key_target(client, key)
    async for items in _pages(
        client,
        lambda c: _core.key_scan_args("SNAPSHOT.HSCAN", key, c, match, count, flag),
        node,
        loading_timeout,
    ):
        for item in items if no_values else _core.pairs(items):
            yield item


async def snapshot_sscan_iter(
    client: AsyncClient,
    key: PatternT,
    match: Optional[PatternT] = None,
    count: Optional[int] = None,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> AsyncIterator[EncodedT]:
    """``async for`` over the members of set ``key`` with ``SNAPSHOT.SSCAN``.
    See :func:`snapscan.snapshot_sscan_iter`."""
    _check(client)
    node = await _key_target(client, key)
    async for items in _pages(
        client,
        lambda c: _core.key_scan_args("SNAPSHOT.SSCAN", key, c, match, count, None),
        node,
        loading_timeout,
    ):
        for item in items:
            yield item


@overload
def snapshot_zscan_iter(
    client: AsyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    no_scores: Literal[False] = ...,
    score_cast_func: Callable[[Any], Any] = ...,
    *,
    loading_timeout: float = ...,
) -> AsyncIterator[Tuple[EncodedT, Any]]: ...
@overload
def snapshot_zscan_iter(
    client: AsyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    *,
    no_scores: Literal[True],
    score_cast_func: Callable[[Any], Any] = ...,
    loading_timeout: float = ...,
) -> AsyncIterator[EncodedT]: ...
@overload
def snapshot_zscan_iter(
    client: AsyncClient,
    key: PatternT,
    match: Optional[PatternT] = ...,
    count: Optional[int] = ...,
    no_scores: bool = ...,
    score_cast_func: Callable[[Any], Any] = ...,
    *,
    loading_timeout: float = ...,
) -> AsyncIterator[Union[EncodedT, Tuple[EncodedT, Any]]]: ...
async def snapshot_zscan_iter(
    client: AsyncClient,
    key: PatternT,
    match: Optional[PatternT] = None,
    count: Optional[int] = None,
    no_scores: bool = False,
    score_cast_func: Callable[[Any], Any] = float,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> AsyncIterator[Any]:
    """``async for`` over sorted set ``key`` with ``SNAPSHOT.ZSCAN``: ``(member,
    score)`` pairs, or members with ``no_scores=True``.
    See :func:`snapscan.snapshot_zscan_iter`."""
    _check(client)
    flag = "NOSCORES" if no_scores else None
    node = await _key_target(client, key)
    async for items in _pages(
        client,
        lambda c: _core.key_scan_args("SNAPSHOT.ZSCAN", key, c, match, count, flag),
        node,
        loading_timeout,
    ):
        if no_scores:
            for item in items:
                yield item
        else:
            for member, score in _core.pairs(items):
                yield member, score_cast_func(score)


async def unlink_matching(
    client: AsyncClient,
    pattern: PatternT,
    _type: Optional[PatternT] = None,
    dry_run: bool = False,
    *,
    loading_timeout: float = DEFAULT_LOADING_TIMEOUT,
) -> int:
    """``await``: ``SNAPSHOT.UNLINK pattern [TYPE type] [DRYRUN]``, summed over the
    primaries of a cluster (or the hash tag's one). See :func:`snapscan.unlink_matching`."""
    _check(client)
    total = 0
    for node in await _scan_targets(client, pattern):
        total += int(await _call(client, _core.unlink_args(pattern, _type, dry_run), node, loading_timeout))
    return total
