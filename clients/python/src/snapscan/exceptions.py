"""Exceptions raised by snapscan (other client errors propagate unchanged)."""

from __future__ import annotations

from typing import Optional


class SnapscanError(Exception):
    """Base class of the errors this package raises itself."""


class SnapshotCursorExpired(SnapscanError):
    """The server no longer knows the iteration's cursor: it was already used,
    stayed unused longer than ``snapshot.cursor-idle-timeout``, was evicted past
    ``snapshot.max-open-cursors``, or the server restarted. The snapshot is gone;
    start a new iteration (from cursor 0).

    The server's error is chained as ``__cause__``.
    """

    def __init__(self, message: str, *, cursor: int, command: str, node: Optional[str] = None) -> None:
        super().__init__(message)
        #: the cursor the server refused
        self.cursor = cursor
        #: the command that was refused, e.g. ``"SNAPSHOT.SCAN"``
        self.command = command
        #: ``host:port`` of the cluster node that refused it (``None`` for a standalone client)
        self.node = node
