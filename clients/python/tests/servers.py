"""Real servers for the tests: standalone or a small cluster, the module loaded.

Each server runs on 127.0.0.1 with a port chosen at run time, in its own
temporary directory (its log is ``server.log`` there), and is stopped with
``SHUTDOWN NOSAVE``. Every wait polls with a deadline.

Server binary: ``SNAPSCAN_SERVER``, else ``scripts/servers.sh valkey-9.1``.
Module: ``SNAPSCAN_MODULE``, else ``target/release/libsnapscan.so`` at the
repository root (built by ``cargo build --release``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import redis

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
CLUSTER_TIMEOUT = 20.0
PORT_ATTEMPTS = 5


def server_binary() -> str:
    path = os.environ.get("SNAPSCAN_SERVER")
    if path:
        return path
    out = subprocess.run(
        [str(REPO / "scripts" / "servers.sh"), "valkey-9.1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(
            "no server: set SNAPSCAN_SERVER or run scripts/install-deps.sh "
            f"(scripts/servers.sh valkey-9.1: {out.stderr.strip()})"
        )
    return out.stdout.strip()


def module_path() -> str:
    path = os.environ.get("SNAPSCAN_MODULE") or str(REPO / "target" / "release" / "libsnapscan.so")
    if not os.path.isfile(path):
        raise RuntimeError(f"no module at {path}: run `cargo build --release` at the repository root")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, predicate: Callable[[], bool], timeout: float) -> None:
    """Polls ``predicate`` every 10 ms until true; fails naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def info_field(info: Any, name: str) -> Optional[str]:
    """Field ``name`` of an INFO reply (text, bytes, or redis-py's parsed dict)."""
    if isinstance(info, dict):
        value = info.get(name)
        return None if value is None else str(value)
    if isinstance(info, bytes):
        info = info.decode()
    for line in info.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


class Server:
    """One server process. ``Server(load_module=False)`` starts it without the module."""

    def __init__(
        self,
        load_module: bool = True,
        module_args: Sequence[str] = (),
        config: Optional[Dict[str, str]] = None,
    ) -> None:
        self.dir = tempfile.mkdtemp(prefix="snapscan-py-test-")
        self.load_module = load_module
        self.module_args = list(module_args)
        self.config = dict(config or {})
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.port = 0
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.port = free_port()
            if "cluster-enabled" in self.config:
                self.config["cluster-port"] = str(free_port())
            err = self._spawn()
            if err is None:
                return
            if "Address already in use" in err and attempt < PORT_ATTEMPTS:
                continue
            self.stop()
            raise RuntimeError(f"server did not start on port {self.port}: {err}")

    @property
    def log_path(self) -> str:
        return os.path.join(self.dir, "server.log")

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def _spawn(self) -> Optional[str]:
        args: List[str] = [
            server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.dir,
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--enable-debug-command", "yes",
            "--enable-module-command", "yes",
        ]  # fmt: skip
        if self.load_module:
            args += ["--loadmodule", module_path(), *self.module_args]
        for name, value in self.config.items():
            args += [f"--{name}", value]
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with {self.proc.returncode}\n{self.log_tail()}"
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5, decode_responses=True)
                try:
                    c.ping()
                    # Ours, not another server that won the race for the port.
                    if c.info("server").get("process_id") == self.proc.pid:
                        return None
                finally:
                    c.close()
            except redis.RedisError:
                pass
            time.sleep(0.01)
        return f"no PONG within {START_TIMEOUT}s\n{self.log_tail()}"

    def client(self, **kwargs: Any) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def module_load(self, *args: str) -> None:
        with self.client() as c:
            c.execute_command("MODULE", "LOAD", module_path(), *args)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # A raw socket: a client library would retry the dropped connection.
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=STOP_TIMEOUT) as s:
                    s.sendall(b"SHUTDOWN NOSAVE\r\n")
                    s.recv(1024)  # "" once the server has exited
            except OSError:
                pass
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """Three primaries (no replicas) with the module loaded, slots split evenly."""

    def __init__(self, nodes: int = 3) -> None:
        self.servers: List[Server] = []
        try:
            for _ in range(nodes):
                self.servers.append(
                    Server(
                        config={
                            "cluster-enabled": "yes",
                            "cluster-config-file": "nodes.conf",
                            "cluster-node-timeout": "5000",
                        }
                    )
                )
            self._form()
        except BaseException:
            self.stop()
            raise

    @property
    def ports(self) -> List[int]:
        return [s.port for s in self.servers]

    def _form(self) -> None:
        n = len(self.servers)
        clients = [s.client(decode_responses=True) for s in self.servers]
        try:
            for i, c in enumerate(clients):
                lo = i * 16384 // n
                hi = (i + 1) * 16384 // n - 1
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
                c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
            for s in self.servers[1:]:
                clients[0].execute_command(
                    "CLUSTER", "MEET", "127.0.0.1", s.port, s.config["cluster-port"]
                )

            def converged() -> bool:
                for c in clients:
                    info = c.execute_command("CLUSTER", "INFO")
                    if isinstance(info, bytes):
                        info = info.decode()
                    if info_field(info, "cluster_state") != "ok":
                        return False
                    if info_field(info, "cluster_known_nodes") != str(n):
                        return False
                    if len(c.execute_command("CLUSTER", "SLOTS")) != n:
                        return False
                return True

            wait_until("the cluster to converge", converged, CLUSTER_TIMEOUT)
        finally:
            for c in clients:
                c.close()

    def node_for_slot(self, slot: int) -> Server:
        n = len(self.servers)
        for i, s in enumerate(self.servers):
            if i * 16384 // n <= slot <= (i + 1) * 16384 // n - 1:
                return s
        raise ValueError(slot)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
