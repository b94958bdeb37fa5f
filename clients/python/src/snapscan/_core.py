"""What the sync and asyncio front ends share: arguments, replies, errors, routing."""

from __future__ import annotations

import logging
import random
import re
import time
from typing import Any, List, Optional, Sequence, Tuple, Union

from .exceptions import SnapshotCursorExpired

#: Keys, fields and members as the client returns them: ``bytes``, or ``str``
#: with ``decode_responses=True``.
EncodedT = Union[bytes, str]
#: What a pattern, key or TYPE name may be given as.
PatternT = Union[bytes, str]

DEFAULT_LOADING_TIMEOUT = 30.0

#: Each LOADING retry is logged here at DEBUG level.
log = logging.getLogger("snapscan")
_BACKOFF_FIRST = 0.01
_BACKOFF_MAX = 0.5

_CURSOR_EXPIRED = re.compile(r"cursor (\d+) is unknown, already used or expired")


def scan_args(cursor: int, match: Optional[PatternT], count: Optional[int], _type: Optional[PatternT]) -> List[Any]:
    args: List[Any] = ["SNAPSHOT.SCAN", cursor]
    if match is not None:
        args += ["MATCH", match]
    if count is not None:
        args += ["COUNT", count]
    if _type is not None:
        args += ["TYPE", _type]
    return args


def key_scan_args(
    command: str,
    key: PatternT,
    cursor: int,
    match: Optional[PatternT],
    count: Optional[int],
    flag: Optional[str],
) -> List[Any]:
    args: List[Any] = [command, key, cursor]
    if match is not None:
        args += ["MATCH", match]
    if count is not None:
        args += ["COUNT", count]
    if flag is not None:
        args.append(flag)
    return args


def unlink_args(pattern: PatternT, _type: Optional[PatternT], dry_run: bool) -> List[Any]:
    args: List[Any] = ["SNAPSHOT.UNLINK", pattern]
    if _type is not None:
        args += ["TYPE", _type]
    if dry_run:
        args.append("DRYRUN")
    return args


def parse_page(reply: Any) -> Tuple[int, Sequence[Any]]:
    """``[cursor, [item, ...]]`` -> (cursor, items)."""
    cursor, items = reply
    return int(cursor), items


def pairs(items: Sequence[Any]) -> List[Tuple[Any, Any]]:
    return list(zip(items[0::2], items[1::2]))


# ------------------------------------------------------------------ errors ----


def _class_names(e: BaseException) -> List[str]:
    return [c.__name__ for c in type(e).__mro__]


def is_loading(e: BaseException) -> bool:
    """A ``LOADING`` reply: redis-py and valkey-py raise ``BusyLoadingError`` for it."""
    if "BusyLoadingError" in _class_names(e):
        return True
    return "ResponseError" in _class_names(e) and str(e).startswith("LOADING")


def cursor_expired(e: BaseException, args: Sequence[Any], node: Optional[str]) -> Optional[SnapshotCursorExpired]:
    """The snapscan error for a cursor that is unknown, already used or expired, as our exception."""
    if "ResponseError" not in _class_names(e):
        return None
    m = _CURSOR_EXPIRED.search(str(e))
    if m is None:
        return None
    return SnapshotCursorExpired(str(e), cursor=int(m.group(1)), command=str(args[0]), node=node)


class Backoff:
    """Delays between retries of a ``LOADING`` reply: 10 ms doubling to 0.5 s, with
    jitter, none past ``timeout`` seconds from now (``None`` then)."""

    def __init__(self, timeout: float) -> None:
        self.deadline = time.monotonic() + max(0.0, timeout)
        self.delay = _BACKOFF_FIRST

    def next_delay(self) -> Optional[float]:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return None
        d = min(self.delay * random.uniform(0.5, 1.0), left)
        self.delay = min(self.delay * 2, _BACKOFF_MAX)
        return d


# ----------------------------------------------------------------- routing ----


def is_cluster(client: Any) -> bool:
    """redis-py / valkey-py cluster clients, sync or asyncio."""
    return hasattr(client, "get_primaries") and hasattr(client, "get_node_from_key")


def node_name(node: Any) -> Optional[str]:
    if node is None:
        return None
    name = getattr(node, "name", None)
    return str(name) if name is not None else str(node)


def literal_prefix(pattern: bytes) -> bytes:
    """The bytes every key matching the glob ``pattern`` starts with (backslash
    escapes resolved, as the server's matcher does)."""
    out = bytearray()
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c in b"*?[":
            break
        if c == 0x5C and i + 1 < n:  # backslash: the next byte is literal
            i += 1
            c = pattern[i]
        out.append(c)
        i += 1
    return bytes(out)


def pattern_hashtag(pattern: Optional[PatternT]) -> Optional[bytes]:
    """The hash tag shared by every key matching ``pattern``, if its literal prefix
    holds a complete non-empty ``{...}``; keys matching it all live in that tag's slot."""
    if pattern is None:
        return None
    raw = pattern.encode("utf-8") if isinstance(pattern, str) else bytes(pattern)
    prefix = literal_prefix(raw)
    start = prefix.find(b"{")
    if start < 0:
        return None
    end = prefix.find(b"}", start + 1)
    if end <= start + 1:  # no closing brace in the prefix, or "{}": the whole key is hashed
        return None
    return prefix[start + 1 : end]
