"""Python client helpers for snapscan, the Valkey/Redis module serving
``SNAPSHOT.SCAN``/``HSCAN``/``SSCAN``/``ZSCAN`` from point-in-time snapshots.

Works with redis-py and valkey-py clients, standalone and cluster. These are the
synchronous functions; :mod:`snapscan.asyncio` has the same for asyncio clients.

    import redis, snapscan
    r = redis.Redis()
    for key in snapscan.snapshot_scan_iter(r, match="user:42:*", count=1000):
        ...
"""

from ._core import DEFAULT_LOADING_TIMEOUT, EncodedT, PatternT
from ._sync import (
    SyncClient,
    snapshot_hscan_iter,
    snapshot_scan_iter,
    snapshot_sscan_iter,
    snapshot_zscan_iter,
    unlink_matching,
)
from .exceptions import SnapscanError, SnapshotCursorExpired

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_LOADING_TIMEOUT",
    "EncodedT",
    "PatternT",
    "SnapscanError",
    "SnapshotCursorExpired",
    "SyncClient",
    "snapshot_hscan_iter",
    "snapshot_scan_iter",
    "snapshot_sscan_iter",
    "snapshot_zscan_iter",
    "unlink_matching",
]
