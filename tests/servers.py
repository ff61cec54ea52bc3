"""Throwaway redis-server and PostgreSQL processes, each in its own temp dir on a free port.

Used by fault tests (kill, pause, restart a server of the test's own) and by tests/services.py.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "PgBouncerServer",
    "PostgresServer",
    "RedisCluster",
    "RedisSentinel",
    "RedisServer",
    "ServerUnavailable",
    "Started",
    "free_port",
    "initdb",
    "pg_run",
    "postgres_answers",
]

HOST = "127.0.0.1"


class ServerUnavailable(RuntimeError):
    """A server binary is missing, or the server did not come up; the message says which."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


# --- process helpers -------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: have the kernel SIGKILL the child when the test process dies (Linux only)."""
    # NOTE: atexit does not run when pytest itself is SIGKILLed or times out in CI; the
    # parent-death signal still reaps the server then. It runs after the uid switch, which
    # would otherwise clear it.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _preexec() -> Callable[[], None] | None:
    return _die_with_parent if sys.platform.startswith("linux") else None


def _signal(pids: int | set[int], sig: int) -> None:
    for pid in {pids} if isinstance(pids, int) else pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _proc_stat(pid: int | str) -> list[str]:
    """Fields of /proc/PID/stat after "(comm)": [state, ppid, pgrp, ...]; [] if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    # NOTE: comm may hold spaces or ")", so split after its last ")".
    return stat.rsplit(")", 1)[-1].split()


def _children(ppid: int) -> set[int]:
    """Live (non-zombie) children of ``ppid``; empty where there is no /proc."""
    proc = Path("/proc")
    if not proc.is_dir():
        return set()
    found: set[int] = set()
    for entry in proc.iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(entry.name)
            if len(fields) > 1 and fields[0] != "Z" and fields[1] == str(ppid):
                found.add(int(entry.name))
    return found


def _wait_gone(pids: set[int], timeout: float, *, zombies_count: bool) -> set[int]:
    """Wait until none of ``pids`` runs (or exists, if ``zombies_count``); return the rest."""
    deadline = time.monotonic() + timeout
    while True:
        left = {
            pid
            for pid in pids
            if (fields := _proc_stat(pid)) and (zombies_count or fields[0] != "Z")
        }
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.01)


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


_LIVE: set[_Server] = set()


@atexit.register
def _stop_all() -> None:
    # NOTE: nothing started here may outlive the interpreter, whatever the tests forgot.
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.close()


class Started(abc.ABC):
    """A context manager over ``start()`` (what ``with`` returns) and ``cleanup()`` (on leaving)."""

    @abc.abstractmethod
    def start(self) -> Self:
        """Start it and return it, ready to use."""

    @abc.abstractmethod
    def cleanup(self) -> None:
        """Stop it and remove what it left on disk."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


class _Server(Started):
    """Shared lifecycle: one child process, a temp dir, signals by PID, context manager."""

    name = "server"

    def __init__(self, *, port: int | None = None, startup_timeout: float = 15.0) -> None:
        self._port = port
        self._fixed_port = port is not None
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._tmp: Path | None = None

    # -- public ----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port; fixed at the first start() and kept by restarts."""
        if self._port is None:
            raise RuntimeError(f"{self.name} has not been started")
        return self._port

    @property
    def pid(self) -> int:
        """PID of the running server process."""
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError(f"{self.name} is not running")
        return self._proc.pid

    @property
    def running(self) -> bool:
        """True while the server process exists (paused counts as running)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def tmpdir(self) -> Path:
        """The server's own temp dir (logs, data, sockets); removed by cleanup()."""
        if self._tmp is None:
            raise RuntimeError(f"{self.name} has not been started")
        return self._tmp

    def start(self) -> Self:
        """Start the server (again, on the same port) and wait until it answers."""
        if self.running:
            return self
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix=f"memory-{self.name}-"))
            try:
                self._prepare()
            except BaseException:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None
                raise
        _LIVE.add(self)
        # NOTE: a port from free_port() can be taken by someone else before the server binds
        # it; retry with a new one, but never move a port that restarts must keep.
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            if self._port is None or (attempt and not self._fixed_port):
                self._port = self._pick_port()
            try:
                self._spawn()
                self._wait_ready()
            except ServerUnavailable:
                self._terminate(signal.SIGKILL)
                if attempt + 1 == attempts:
                    raise
            else:
                self._fixed_port = True
                return self
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 10.0) -> None:
        """Shut down cleanly (resuming a paused server first); SIGKILL after ``timeout``."""
        if not self.running:
            return
        if self._paused:
            self.resume()
        self._terminate(self._stop_signal, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the server: a crash, with no clean shutdown."""
        if self.running:
            self._terminate(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP the server: it keeps its sockets open but answers nothing."""
        _signal(self._processes(), signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT a paused server."""
        _signal(self._processes(), signal.SIGCONT)
        self._paused = False

    def restart(self) -> Self:
        """stop() then start() on the same port."""
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        """Stop the server if needed and remove its temp dir."""
        self.stop(timeout=5.0)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        _LIVE.discard(self)

    close = cleanup

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} port={self._port} {state}>"

    # -- subclass hooks ----------------------------------------------------------------------

    _stop_signal: int = signal.SIGTERM

    @property
    def log_path(self) -> Path:
        return self.tmpdir / f"{self.name}.log"

    def _prepare(self) -> None:
        """Prepare the fresh temp dir (once per server)."""

    def _pick_port(self) -> int:
        """A port to try; restarts keep the one that worked."""
        return free_port()

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _popen_kwargs(self) -> dict[str, Any]:
        return {}

    def _ping(self) -> bool:
        raise NotImplementedError

    def _processes(self) -> set[int]:
        """Every process of the running server (signalled by pause and resume)."""
        return {self._proc.pid} if self._proc is not None and self.running else set()

    def _after_exit(self, leftovers: set[int]) -> None:
        """Called once the server has exited with the other PIDs it had before."""

    # -- internals -------------------------------------------------------------------------

    def _spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.tmpdir,
                # NOTE: a session of its own, so a Ctrl-C meant for pytest does not reach
                # the server in the middle of teardown.
                start_new_session=True,
                preexec_fn=_preexec(),
                **self._popen_kwargs(),
            )
        self._paused = False

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise ServerUnavailable(
                    f"{self.name} exited during startup on port {self._port}: "
                    f"{_log_tail(self.log_path)}"
                )
            if self._ping():
                return
            time.sleep(0.05)
        raise ServerUnavailable(
            f"{self.name} did not answer on port {self._port} within "
            f"{self.startup_timeout:g}s: {_log_tail(self.log_path)}"
        )

    def _terminate(self, sig: int, timeout: float = 5.0) -> None:
        proc = self._proc
        if proc is None:
            return
        others = self._processes() - {proc.pid}
        if proc.poll() is None:
            _signal(proc.pid, sig)
            if self._paused:
                _signal(proc.pid, signal.SIGCONT)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5.0)
        self._after_exit(others)
        self._paused = False


# --- Redis -----------------------------------------------------------------------------------


class RedisServer(_Server):
    """A redis-server with no persistence: ``RedisServer(extra_args=["--maxmemory", "1mb"])``.

    ``password``: ``requirepass`` (the default user's). ``tls``: TLS only, with a certificate
    of its own made by ``openssl`` (``ca_path`` verifies it); ``url`` is then ``rediss://``.
    """

    name = "redis"

    def __init__(
        self,
        *,
        extra_args: Sequence[str] = (),
        port: int | None = None,
        startup_timeout: float = 10.0,
        password: str | None = None,
        tls: bool = False,
    ) -> None:
        super().__init__(port=port, startup_timeout=startup_timeout)
        self.extra_args = list(extra_args)
        self.password = password
        self.tls = tls
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServerUnavailable("redis-server not found on PATH (apt-get install redis-server)")
        if tls and shutil.which("openssl") is None:
            raise ServerUnavailable("openssl not found on PATH (apt-get install openssl)")
        self.binary = binary

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` (``rediss://`` with TLS), without the password."""
        return f"{'rediss' if self.tls else 'redis'}://{HOST}:{self.port}/0"

    @property
    def ca_path(self) -> Path:
        """The certificate a TLS client verifies this server with."""
        return self.tmpdir / "tls.crt"

    def _prepare(self) -> None:
        if self.tls:
            command = [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=IP:{HOST}",
                "-keyout", str(self.tmpdir / "tls.key"), "-out", str(self.ca_path),
            ]  # fmt: skip
            subprocess.run(command, check=True, capture_output=True)

    def _command(self) -> list[str]:
        listen = ["--port", str(self.port)]
        if self.tls:
            listen = [
                "--port", "0", "--tls-port", str(self.port), "--tls-auth-clients", "no",
                "--tls-cert-file", str(self.ca_path),
                "--tls-key-file", str(self.tmpdir / "tls.key"),
            ]  # fmt: skip
        return [
            self.binary,
            *listen,
            "--bind", HOST,
            "--dir", str(self.tmpdir),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            *(["--requirepass", self.password] if self.password else []),
            *self.extra_args,
        ]  # fmt: skip

    def _ping(self) -> bool:
        if self.tls:
            import redis

            client = redis.Redis(
                host=HOST,
                port=self.port,
                password=self.password,
                ssl=True,
                ssl_ca_certs=str(self.ca_path),
                socket_timeout=0.25,
                socket_connect_timeout=0.25,
            )
            try:
                return bool(client.ping())
            except (redis.RedisError, OSError):
                return False
            finally:
                client.close()
        return _redis_ping(HOST, self.port, timeout=0.25)


def _redis_ping(host: str, port: int, *, timeout: float = 1.0) -> bool:
    """True if a Redis at host:port answers PING within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            # NOTE: a server with a password answers, if only to say it wants one.
            return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class _ClusterNode(RedisServer):
    """A cluster node: its cluster bus listens on port + 10000, which must be free too."""

    name = "redis-node"

    def _pick_port(self) -> int:
        while True:
            port = free_port()
            if port + 10000 > 65535:
                continue
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((HOST, port + 10000))
            except OSError:
                continue
            return port


class RedisCluster(Started):
    """A Redis Cluster of ``masters`` primaries with ``replicas`` replicas each, every node a
    ``RedisServer`` of its own (so kill, pause and restart act on one node, by PID).

    ``cluster-require-full-coverage no``: the surviving primaries keep answering for their
    slots while one primary's are failed over, as a production cluster serving a cache should.
    """

    def __init__(self, *, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000) -> None:
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.nodes: list[RedisServer] = []
        self._masters_before: set[int] = set()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise ServerUnavailable("redis-cli not found on PATH (apt-get install redis-tools)")
        self.cli = cli

    @property
    def url(self) -> str:
        """A seed node, ``redis://127.0.0.1:PORT``: the first node that is running."""
        for node in self.nodes:
            if node.running:
                return f"redis://{HOST}:{node.port}"
        raise RuntimeError("no node of the cluster is running")

    def start(self) -> Self:
        """Start every node, join them with ``redis-cli --cluster create``, wait for state ok."""
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-require-full-coverage", "no",
            # NOTE: a replica that lost its primary a while ago may still be promoted: the
            # tests pause nodes for longer than production timeouts would allow.
            "--cluster-replica-validity-factor", "0",
        ]  # fmt: skip
        try:
            for _ in range(self.masters * (1 + self.replicas)):
                self.nodes.append(_ClusterNode(extra_args=args).start())
            result = subprocess.run(
                [
                    self.cli, "--cluster", "create",
                    *(f"{HOST}:{node.port}" for node in self.nodes),
                    "--cluster-replicas", str(self.replicas),
                    "--cluster-yes",
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )  # fmt: skip
            if result.returncode != 0:
                raise ServerUnavailable(
                    f"redis-cli --cluster create failed: {(result.stderr or result.stdout)[-500:]}"
                )
            self.wait_stable()
            self.wait_replicas_synced()
        except BaseException:
            self.cleanup()
            raise
        return self

    def command(self, node: RedisServer, *args: str) -> Any:
        """One command to one node, on a connection of its own (redis-py, short timeouts)."""
        import redis

        with redis.Redis(
            host=HOST, port=node.port, socket_timeout=2, socket_connect_timeout=1
        ) as client:
            return client.execute_command(*args)

    def topology(self) -> dict[int, tuple[str, int | None]]:
        """``{port: (role, port of its primary or None)}`` as a running node sees the cluster."""
        for node in self.nodes:
            if not node.running:
                continue
            try:
                text = self.command(node, "CLUSTER", "NODES")
            except Exception:
                # NOTE: a node going down or failing over; ask the next one.
                continue
            text = text.decode() if isinstance(text, bytes) else str(text)
            ids: dict[str, int] = {}
            rows: list[tuple[int, str, str]] = []
            for line in text.strip().splitlines():
                fields = line.split()
                port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
                ids[fields[0]] = port
                flags = fields[2].split(",")
                role = "master" if "master" in flags else "replica"
                if "fail" in flags or "fail?" in flags:
                    role = "failed"
                rows.append((port, role, fields[3]))
            return {port: (role, ids.get(primary)) for port, role, primary in rows}
        raise RuntimeError("no node of the cluster answers")

    def master_for(self, key: str) -> RedisServer:
        """The node that holds ``key``'s slot now."""
        for node in self.nodes:
            if not node.running:
                continue
            slot = int(self.command(node, "CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in self.command(node, "CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    port = int(primary[1])
                    return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no node holds the slot of {key!r}")

    def replicas_of(self, master: RedisServer) -> list[RedisServer]:
        """The nodes replicating ``master`` now."""
        top = self.topology()
        return [n for n in self.nodes if top.get(n.port, ("", None))[1] == master.port]

    def wait_replicas_synced(self, timeout: float = 30.0) -> None:
        """Wait until every running primary has its ``replicas`` replicas online (their first
        full sync done): before that, a WAIT for one replica cannot be satisfied."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            online = []
            for port, (role, _) in self.topology().items():
                if role != "master":
                    continue
                node = next(n for n in self.nodes if n.port == port)
                info = self.command(node, "INFO", "replication")
                synced = [
                    value
                    for name, value in info.items()
                    if name.startswith("slave")
                    and isinstance(value, dict)
                    and value.get("state") == "online"
                ]
                online.append(len(synced) >= self.replicas)
            if online and all(online):
                return
            time.sleep(0.1)
        raise ServerUnavailable(f"replicas not synced within {timeout:g}s")

    def wait_stable(self, timeout: float = 30.0) -> None:
        """Wait until every running node reports ``cluster_state:ok`` with all slots served
        and agrees on one primary per slot range."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                states = [
                    self.command(node, "CLUSTER", "INFO") for node in self.nodes if node.running
                ]
                infos = [s.decode() if isinstance(s, bytes) else str(s) for s in states]
                last = infos[0] if infos else ""
                if infos and all(
                    "cluster_state:ok" in info and "cluster_slots_ok:16384" in info
                    for info in infos
                ):
                    top = self.topology()
                    running = {n.port for n in self.nodes if n.running}
                    masters = [p for p, (role, _) in top.items() if role == "master"]
                    if len(masters) == self.masters and set(masters) <= running:
                        return
            except Exception:
                pass  # NOTE: nodes still joining or failing over
            time.sleep(0.1)
        raise ServerUnavailable(f"cluster not stable within {timeout:g}s: {last[:300]}")

    def wait_promoted(self, dead: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until a replica of the killed primary ``dead`` serves its slots; return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            top = self.topology()
            promoted = [
                node
                for node in self.nodes
                if node.running
                and node.port not in self._masters_before
                and top.get(node.port, ("", None))[0] == "master"
            ]
            if promoted:
                self.wait_stable(timeout=max(deadline - time.monotonic(), 1.0))
                return promoted[0]
            time.sleep(0.1)
        raise ServerUnavailable(f"no replica of port {dead.port} was promoted in {timeout:g}s")

    def wait_replica(self, node: RedisServer, timeout: float = 30.0) -> None:
        """Wait until ``node`` (a former primary, restarted) replicates a primary in sync."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = self.command(node, "INFO", "replication")
                if (
                    info.get("role") == "slave"
                    and info.get("master_link_status") == "up"
                    and self.topology().get(node.port, ("", None))[0] == "replica"
                ):
                    return
            except Exception:
                pass  # NOTE: still loading or handshaking
            time.sleep(0.1)
        raise ServerUnavailable(f"port {node.port} did not rejoin as a replica in {timeout:g}s")

    def wait_synced(
        self, primary: RedisServer, replica: RedisServer, timeout: float = 10.0
    ) -> None:
        """Wait until ``replica`` has applied everything ``primary`` wrote so far."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            offset = self.command(primary, "INFO", "replication")["master_repl_offset"]
            if self.command(replica, "INFO", "replication").get("slave_repl_offset", -1) >= offset:
                return
            time.sleep(0.02)
        raise ServerUnavailable(f"port {replica.port} did not catch up in {timeout:g}s")

    def kill(self, node: RedisServer) -> None:
        """SIGKILL one node; remembers which nodes were primaries, for wait_promoted()."""
        top = self.topology()
        self._masters_before = {p for p, (role, _) in top.items() if role == "master"}
        node.kill()

    def flushall(self) -> None:
        """FLUSHALL on every primary (their replicas follow)."""
        top = self.topology()
        for node in self.nodes:
            if node.running and top.get(node.port, ("", None))[0] == "master":
                self.command(node, "FLUSHALL")

    def cleanup(self) -> None:
        """Stop every node (by PID) and remove their temp dirs."""
        for node in self.nodes:
            node.cleanup()


class RedisSentinel(RedisServer):
    """A redis-server in sentinel mode watching the primary ``primary_port`` as ``master``."""

    name = "sentinel"

    def __init__(
        self,
        *,
        master: str,
        primary_port: int,
        quorum: int = 2,
        down_after_ms: int = 1000,
        timings: Mapping[str, int] | None = None,
        port: int | None = None,
    ) -> None:
        super().__init__(port=port)
        self.master = master
        self.primary_port = primary_port
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.timings = dict(timings or {})

    def start(self) -> Self:
        """Start the sentinel, then set ``timings`` (``SENTINEL DEBUG``, in milliseconds)."""
        super().start()
        if self.timings:
            import redis

            args = [str(part) for pair in self.timings.items() for part in pair]
            with redis.Redis(host=HOST, port=self.port, socket_timeout=2) as client:
                client.execute_command("SENTINEL", "DEBUG", *args)
        return self

    def _prepare(self) -> None:
        # NOTE: a sentinel rewrites its config file (what it learnt of replicas and epochs),
        # so it is a file of the sentinel's own, in its temp dir.
        (self.tmpdir / "sentinel.conf").write_text(
            f"sentinel monitor {self.master} {HOST} {self.primary_port} {self.quorum}\n"
            f"sentinel down-after-milliseconds {self.master} {self.down_after_ms}\n"
            f"sentinel failover-timeout {self.master} 5000\n"
            f"sentinel parallel-syncs {self.master} 1\n"
        )

    def _command(self) -> list[str]:
        return [
            self.binary, str(self.tmpdir / "sentinel.conf"), "--sentinel",
            "--port", str(self.port),
            "--bind", HOST,
            "--dir", str(self.tmpdir),
            "--daemonize", "no",
        ]  # fmt: skip

    def primary(self) -> int | None:
        """The port of the primary this sentinel names now, or None if it does not answer."""
        import redis

        try:
            with redis.Redis(host=HOST, port=self.port, socket_timeout=1) as client:
                reply = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
        except redis.RedisError:
            return None
        return int(reply[1]) if reply else None


# --- PostgreSQL ------------------------------------------------------------------------------


def _unprivileged(what: str) -> pwd.struct_passwd | None:
    """The ``postgres`` account to run ``what`` as when this process is root; else None (this
    user). Raises ``ServerUnavailable`` for root without that account."""
    if os.geteuid() != 0:
        return None
    # NOTE: PostgreSQL and PgBouncer refuse to run as root; they run as `postgres`
    # (subprocess user=/group=, no su/runuser in between) in a dir it owns.
    try:
        return pwd.getpwnam("postgres")
    except KeyError as e:
        raise ServerUnavailable(
            f"running as root, and there is no `postgres` user to run {what} as"
        ) from e


def _as_account(account: pwd.struct_passwd | None) -> dict[str, Any]:
    """subprocess keyword arguments that run a child as ``account`` (none for None)."""
    if account is None:
        return {}
    return {
        "user": account.pw_uid,
        "group": account.pw_gid,
        "extra_groups": os.getgrouplist(account.pw_name, account.pw_gid),
        "env": {**os.environ, "HOME": account.pw_dir, "USER": account.pw_name},
    }


def _pg_bindir() -> Path:
    """The first directory holding both initdb and postgres: PATH, then /usr/lib/postgresql."""
    candidates: list[Path] = []
    for name in ("initdb", "pg_ctl", "postgres"):
        found = shutil.which(name)
        if found:
            candidates.append(Path(found).resolve().parent)
    # NOTE: Debian keeps the binaries off PATH, one dir per major version; newest wins.
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(versions)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    raise ServerUnavailable(
        "PostgreSQL server binaries (initdb, postgres) not found on PATH or in "
        "/usr/lib/postgresql/*/bin (apt-get install postgresql)"
    )


class PostgresServer(_Server):
    """A throwaway PostgreSQL cluster: trust auth, fsync off, TCP on 127.0.0.1 only."""

    name = "postgres"
    # NOTE: SIGINT is PostgreSQL's "fast" shutdown (what `pg_ctl stop -m fast` sends); SIGTERM
    # is "smart" and would wait for every open client, e.g. Django's persistent connection.
    _stop_signal = signal.SIGINT

    def __init__(self, *, port: int | None = None, startup_timeout: float = 30.0) -> None:
        super().__init__(port=port, startup_timeout=startup_timeout)
        self.bindir = _pg_bindir()
        # NOTE: initdb and postgres refuse to run as root.
        self._as = _unprivileged("initdb")
        self.user = self._as.pw_name if self._as else pwd.getpwuid(os.geteuid()).pw_name

    @property
    def url(self) -> str:
        """``postgres://USER@127.0.0.1:PORT/postgres``; USER is the account initdb ran as."""
        return self.url_for("postgres")

    def url_for(self, dbname: str) -> str:
        """The URL of database ``dbname`` on this server (it need not exist yet)."""
        return f"postgres://{self.user}@{HOST}:{self.port}/{dbname}"

    @property
    def datadir(self) -> Path:
        return self.tmpdir / "data"

    @property
    def pid(self) -> int:
        """The postmaster's PID, as written in postmaster.pid."""
        proc_pid = super().pid
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.datadir / "postmaster.pid").read_text().split()[0])
        return proc_pid

    def _prepare(self) -> None:
        if self._as is not None:
            os.chown(self.tmpdir, self._as.pw_uid, self._as.pw_gid)
        initdb(self.bindir, self.datadir, cwd=self.tmpdir, **self._popen_kwargs())

    def _popen_kwargs(self) -> dict[str, Any]:
        return _as_account(self._as)

    def _command(self) -> list[str]:
        return [
            str(self.bindir / "postgres"),
            "-D", str(self.datadir),
            "-p", str(self.port),
            "-k", str(self.tmpdir),
            "-c", f"listen_addresses={HOST}",
            # NOTE: fsync off only risks data on an OS crash; synchronous_commit stays on, or
            # kill() would lose transactions the client saw committed.
            "-c", "fsync=off",
            "-c", "full_page_writes=off",
            "-c", "restart_after_crash=off",
        ]  # fmt: skip

    def _ping(self) -> bool:
        return postgres_answers(self.url)

    def kill(self) -> None:
        """A crash: SIGKILL every server process; no shutdown checkpoint, recovery on start()."""
        if not self.running:
            return
        assert self._proc is not None
        proc = self._proc
        # NOTE: killing the postmaster first would orphan its backends, and an init that does
        # not reap (as in some containers) keeps them as zombies. So its children are killed
        # instead, until the postmaster, with restart_after_crash=off, reaps them and exits.
        _signal(proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 5.0
        while proc.poll() is None and time.monotonic() < deadline:
            _signal(_children(proc.pid), signal.SIGKILL)
            time.sleep(0.01)
        self._terminate(signal.SIGKILL)

    def _processes(self) -> set[int]:
        # NOTE: each backend calls setsid(), so the postmaster's process group is no handle on
        # them; pause() stops its children too, so open connections hang like new ones.
        procs = super()._processes()
        for pid in set(procs):
            procs |= _children(pid)
        return procs

    def _after_exit(self, leftovers: set[int]) -> None:
        # NOTE: an orphaned backend holds the shared memory the next start() needs.
        _reap(leftovers, ("postgres",))


class PostgresStandby(PostgresServer):
    """A hot standby of ``primary``, streaming its WAL asynchronously: a base backup of it
    (``pg_basebackup -R``) started in recovery. ``cut()`` stops its streaming (what it received
    stays, what the primary commits next never reaches it); ``promote()`` makes it a primary
    on a new timeline."""

    name = "postgres-standby"

    def __init__(self, primary: PostgresServer, *, startup_timeout: float = 30.0) -> None:
        super().__init__(startup_timeout=startup_timeout)
        self.primary = primary

    def _prepare(self) -> None:
        if self._as is not None:
            os.chown(self.tmpdir, self._as.pw_uid, self._as.pw_gid)
        pg_run(
            self.bindir, "pg_basebackup",
            "-h", HOST, "-p", str(self.primary.port), "-U", self.primary.user,
            "-D", str(self.datadir), "-R", "-X", "stream", "-c", "fast", "--no-sync",
            cwd=self.tmpdir, **self._popen_kwargs(),
        )  # fmt: skip

    def sql(self, statement: str) -> Any:
        """Run ``statement`` on this server's ``postgres`` database; its first row's value."""
        import psycopg

        with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
            cursor = conn.execute(statement)
            row = cursor.fetchone() if cursor.description else None
        return row[0] if row else None

    def replayed(self) -> bool:
        """Whether this standby replayed everything the primary has written so far."""
        import psycopg

        with psycopg.connect(self.primary.url, connect_timeout=2, autocommit=True) as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # type: ignore[index]
        return bool(self.sql(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"))

    def wait_replayed(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.replayed():
            if time.monotonic() > deadline:
                raise TimeoutError("the standby did not catch up with its primary")
            time.sleep(0.02)

    def cut(self, timeout: float = 10.0) -> None:
        """Stop streaming from the primary, and wait until the WAL receiver is gone."""
        self.sql("ALTER SYSTEM SET primary_conninfo = ''")
        self.sql("SELECT pg_reload_conf()")
        deadline = time.monotonic() + timeout
        while self.sql("SELECT count(*) FROM pg_stat_wal_receiver"):
            if time.monotonic() > deadline:
                raise TimeoutError("the standby's WAL receiver did not stop")
            time.sleep(0.02)

    def promote(self) -> None:
        """End recovery: this server becomes a primary on a new timeline (waits for it)."""
        if not self.sql("SELECT pg_promote(true, 30)"):
            raise TimeoutError("the standby was not promoted")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _reap(leftovers: set[int], names: tuple[str, ...]) -> None:
    """Give ``leftovers`` 2 s to exit, then SIGKILL those still running a program of ``names``
    and wait up to 5 s for them to go."""
    alive = _wait_gone(leftovers, 2.0, zombies_count=False)
    _signal({pid for pid in alive if _comm(pid) in names}, signal.SIGKILL)
    _wait_gone(alive, 5.0, zombies_count=False)


def pg_run(bindir: Path, program: str, *args: str, cwd: Path, **popen: Any) -> None:
    """Run ``bindir``'s ``program`` with ``args`` in ``cwd`` (``popen``: the account to run as);
    ``ServerUnavailable`` naming it, with its output, if it fails."""
    result = subprocess.run(
        [str(bindir / program), *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        **popen,
    )
    if result.returncode != 0:
        raise ServerUnavailable(
            f"{program} failed ({result.returncode}): {(result.stderr or result.stdout).strip()}"
        )


def initdb(bindir: Path, datadir: Path, *, cwd: Path, **popen: Any) -> None:
    """A new cluster in ``datadir`` by ``bindir``'s initdb: trust auth, UTF-8, C locale, no fsync
    (``pg_run``)."""
    pg_run(
        bindir, "initdb", "-D", str(datadir),
        "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync",
        cwd=cwd, **popen,
    )  # fmt: skip


def postgres_answers(url: str) -> bool:
    """Whether the server of ``url`` answers a query within 2 s to connect."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


# --- PgBouncer -------------------------------------------------------------------------------

PGBOUNCER_MISSING = (
    "pgbouncer is not installed: run scripts/ensure-pgbouncer as root (it uses apt-get), or "
    "apt-get install pgbouncer"
)


def pgbouncer_binary() -> str | None:
    """The pgbouncer executable: on PATH, or in /usr/sbin where Debian puts it (off an
    ordinary user's PATH); None if there is none."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")


class PgBouncerServer(_Server):
    """A PgBouncer on 127.0.0.1 in front of the PostgreSQL of ``server_url``: any database
    of that server, by the name the client asks for, as the URL's user, in transaction pooling
    mode. ``settings`` adds to or replaces lines of its ``[pgbouncer]`` section (``SETTINGS``).
    Raises ``ServerUnavailable`` (its message ``PGBOUNCER_MISSING``) where it is not installed.
    """

    name = "pgbouncer"
    SETTINGS: Mapping[str, str] = {
        "pool_mode": "transaction",
        # NOTE: a query waits this long for a server connection, then fails: with Postgres
        # down, the app answers 503 in 3 s. The default, 120 s, hangs the request instead.
        "query_wait_timeout": "3",
        # NOTE: after a failed login to Postgres the next attempt waits this long (default
        # 15 s): service resumes within a second of the database's return.
        "server_login_retry": "1",
        # NOTE: startup parameters PgBouncer refuses a connection for unless told to ignore
        # them: JDBC's extra_float_digits, and libpq's options (Django's OPTIONS["options"]).
        # psycopg 3 sends neither by itself.
        "ignore_startup_parameters": "extra_float_digits,options",
        "max_client_conn": "500",
        "default_pool_size": "20",
    }

    def __init__(
        self,
        server_url: str,
        *,
        settings: Mapping[str, str] | None = None,
        port: int | None = None,
        startup_timeout: float = 10.0,
    ) -> None:
        super().__init__(port=port, startup_timeout=startup_timeout)
        binary = pgbouncer_binary()
        if binary is None:
            raise ServerUnavailable(PGBOUNCER_MISSING)
        self.binary = binary
        self.server_url = server_url
        self.settings = {**self.SETTINGS, **(settings or {})}
        self._as = _unprivileged("pgbouncer")
        parts = urlsplit(server_url)
        self.user = unquote(parts.username or "") or pwd.getpwuid(os.geteuid()).pw_name
        self.password = unquote(parts.password or "")
        self.backend = (parts.hostname or HOST, parts.port or 5432)

    @property
    def url(self) -> str:
        """``postgres://USER@127.0.0.1:PORT/postgres``, through this PgBouncer."""
        return self.url_for("postgres")

    def url_for(self, dbname: str) -> str:
        """The URL of database ``dbname`` of the server behind, through this PgBouncer."""
        password = f":{quote(self.password, safe='')}" if self.password else ""
        return f"postgres://{quote(self.user, safe='')}{password}@{HOST}:{self.port}/{dbname}"

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (POOLS, CLIENTS, CONFIG...), as dicts."""
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(
            **self._console(), connect_timeout=2, autocommit=True, row_factory=dict_row
        ) as conn:
            # NOTE: the console speaks only the simple query protocol, which psycopg uses
            # for a statement without parameters.
            return conn.execute(f"SHOW {what}").fetchall()

    def _console(self) -> dict[str, Any]:
        return {"host": HOST, "port": self.port, "dbname": "pgbouncer", "user": self.user}

    def _prepare(self) -> None:
        if self._as is not None:
            os.chown(self.tmpdir, self._as.pw_uid, self._as.pw_gid)
        # NOTE: trust, as the throwaway Postgres servers are; the user must still be in the
        # auth file, whose password (if the URL has one) logs in to the server.
        quoted = self.password.replace('"', '""')
        (self.tmpdir / "userlist.txt").write_text(f'"{self.user}" "{quoted}"\n')

    def _spawn(self) -> None:
        # NOTE: written on each spawn: the port is the one start() picked.
        host, port = self.backend
        lines = [
            "[databases]",
            f"* = host={host} port={port}",
            "[pgbouncer]",
            f"listen_addr = {HOST}",
            f"listen_port = {self.port}",
            f"unix_socket_dir = {self.tmpdir}",
            "auth_type = trust",
            f"auth_file = {self.tmpdir / 'userlist.txt'}",
            f"admin_users = {self.user}",
            *(f"{key} = {value}" for key, value in self.settings.items()),
        ]
        (self.tmpdir / "pgbouncer.ini").write_text("\n".join(lines) + "\n")
        super()._spawn()

    def _command(self) -> list[str]:
        return [self.binary, str(self.tmpdir / "pgbouncer.ini")]

    def _popen_kwargs(self) -> dict[str, Any]:
        return _as_account(self._as)

    def _ping(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(**self._console(), connect_timeout=2, autocommit=True) as conn:
                conn.execute("SHOW VERSION")
        except psycopg.Error:
            return False
        return True


# --- the demo under uvicorn ------------------------------------------------------------------


@contextlib.contextmanager
def uvicorn_demo(env: Mapping[str, str], *, name: str) -> Iterator[int]:
    """The demo project under uvicorn with ``env``, on a free port of 127.0.0.1, until the
    block ends; its port. ``name`` names its log (``/tmp/memory-<name>-<port>.log``), which is
    shown if it exits during startup and removed after."""
    port = free_port()
    log_path = Path(f"/tmp/memory-{name}-{port}.log")
    command = [
        sys.executable, "-m", "uvicorn", "memoryproj.asgi:application",
        "--host", HOST, "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip
    root = Path(__file__).resolve().parent.parent
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, cwd=root, env=dict(env), stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection((HOST, port), timeout=1):
                    break
            except OSError:
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)
        log_path.unlink(missing_ok=True)
