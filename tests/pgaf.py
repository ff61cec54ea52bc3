"""pg_auto_failover from local binaries (Debian's ``postgresql-15-auto-failover``): a monitor, a
primary and its standbys, each a ``pg_autoctl`` supervisor of the test's own (with the Postgres it
runs) on a free port in a temp dir, with synchronous replication and failover timings of seconds.

Used by the failover fault tests and ``make bench``'s failover rows; ``scripts/ensure-pg-auto-
failover`` installs the engine. Only the processes started here are ever signalled, by PID.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from tests.servers import (
    HOST,
    ServerUnavailable,
    Started,
    _as_account,
    _children,
    _pg_bindir,
    _proc_stat,
    _reap,
    _Server,
    _signal,
    _unprivileged,
    free_port,
    initdb,
    postgres_answers,
)
from tests.stack import AppStack

__all__ = ["PGAF_MISSING", "AutoFailover", "AutoctlNode", "pg_autoctl_binary"]

PGAF_MISSING = (
    "pg_autoctl is not installed: run scripts/ensure-pg-auto-failover as root (it uses "
    "apt-get), or apt-get install postgresql-15-auto-failover"
)

# NOTE: what every Postgres of the formation runs with (the monitor's too): pg_autoctl sizes
# shared_buffers and wal_keep_size from the machine's memory (gigabytes each), too much for three
# servers beside a test suite. fsync off risks data only on an OS crash; a SIGKILL loses
# nothing a commit acknowledged. full_page_writes stays on: pg_rewind (a rejoin) needs it.
SERVER_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "shared_buffers": "64MB",
    "effective_cache_size": "256MB",
    "work_mem": "4MB",
    "maintenance_work_mem": "64MB",
    "wal_keep_size": "128MB",
    # NOTE: pg_autoctl's base backup waits for a checkpoint it does not ask to be fast: spread
    # over minutes by default while the primary is being written to.
    "checkpoint_completion_target": "0",
}

# The monitor's timings (milliseconds): a primary whose keeper and Postgres stopped answering is
# declared failed about 2 s after its last report, and its standby promoted 3 s after that (the
# time the monitor gives a primary it cannot reach to see the partition and demote itself). The
# defaults: 20 s and 30 s (docs/scaling.md says what a site keeps).
MONITOR_SETTINGS: Mapping[str, str] = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "2000",
    "pgautofailover.primary_demote_timeout": "3000",
    "pgautofailover.startup_grace_period": "0",
}

# States in which a node takes writes, as the monitor reports them.
WRITABLE = ("single", "wait_primary", "primary")


def pg_autoctl_binary() -> str | None:
    """The pg_autoctl executable (Debian's /usr/bin/pg_autoctl), or None where it is missing."""
    found = shutil.which("pg_autoctl")
    if found:
        return found
    with contextlib.suppress(ServerUnavailable):
        binary = _pg_bindir() / "pg_autoctl"
        if binary.is_file():
            return str(binary)
    return None


def _tree(pid: int, home: Path) -> set[int]:
    """The live processes of the node whose supervisor is (or was) ``pid``: those of its
    session (which outlive the supervisor if it dies alone) and their descendants (a backend is
    a session's leader), each working in ``home``, the node's temp dir: a PID the system gave
    to another process since is never one of them."""

    def ours(process: int | str) -> bool:
        try:
            return Path(f"/proc/{process}/cwd").resolve().is_relative_to(home)
        except OSError:
            return False

    found = set()
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            fields = _proc_stat(entry.name) if entry.name.isdigit() else []
            if len(fields) > 3 and fields[0] != "Z" and fields[3] == str(pid) and ours(entry.name):
                found.add(int(entry.name))
    todo = list(found)
    while todo:
        children = {child for child in _children(todo.pop()) - found if ours(child)}
        found |= children
        todo += children
    return found


class AutoctlNode(_Server):
    """One ``pg_autoctl`` supervisor of the formation and the Postgres it runs: the monitor,
    or a data node. Its first start creates it (``pg_autoctl create ... --run``); a start after
    a stop or a kill runs it again (``pg_autoctl run``), as a host's service manager would."""

    def __init__(self, formation: AutoFailover, name: str, *, monitor: bool = False) -> None:
        super().__init__(port=free_port(), startup_timeout=formation.startup_timeout)
        self.formation = formation
        self.name = name
        self.monitor = monitor
        self.created = False

    @property
    def pgdata(self) -> Path:
        return self.tmpdir / "data"

    @property
    def url(self) -> str:
        """This node's ``postgres`` database (the monitor's ``pg_auto_failover``)."""
        return self.url_for("pg_auto_failover" if self.monitor else "postgres")

    def url_for(self, dbname: str) -> str:
        return f"postgres://{self.formation.user}@{HOST}:{self.port}/{dbname}"

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        """The rows of ``statement`` on this node's database (autocommit, 2 s to connect)."""
        import psycopg

        with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def autoctl(self, *args: str) -> str:
        """``pg_autoctl <args> --pgdata <this node>`` as the formation's account; its output."""
        result = subprocess.run(
            [self.formation.binary, *args, "--pgdata", str(self.pgdata)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            **self._popen_kwargs(),
        )
        if result.returncode != 0:
            raise ServerUnavailable(
                f"pg_autoctl {' '.join(args)} failed: {(result.stderr or result.stdout)[-800:]}"
            )
        return result.stdout

    def kill(self) -> None:
        """A crash of the node's host: SIGKILL the supervisor, its Postgres and every other
        process of it at once (stopped first, so that none acts on another's death)."""
        if self._proc is None or self._tmp is None:
            return
        # NOTE: stopped until no new process shows up, since one may be forking as the tree is
        # read (pg_autoctl restarts its services); a stopped process forks no more.
        stopped: set[int] = set()
        while new := _tree(self._proc.pid, self.tmpdir.resolve()) - stopped:
            _signal(new, signal.SIGSTOP)
            stopped |= new
        _signal(stopped, signal.SIGKILL)
        self._terminate(signal.SIGKILL)

    # -- _Server hooks ---------------------------------------------------------------------------

    _stop_signal = signal.SIGINT  # pg_autoctl's fast shutdown (Postgres' too)

    def _prepare(self) -> None:
        account = self.formation.account
        for sub in ("config", "share", "run"):
            (self.tmpdir / sub).mkdir(mode=0o700)
        if account is not None:
            for path in [self.tmpdir, *self.tmpdir.iterdir()]:
                os.chown(path, account.pw_uid, account.pw_gid)
        if self.monitor or self is self.formation.nodes[0]:
            # NOTE: a cluster of our own, which pg_autoctl adopts (a standby is its base backup,
            # settings included): initdb without fsync, the settings above in postgresql.auto.conf.
            initdb(self.formation.bindir, self.pgdata, cwd=self.tmpdir, **self._popen_kwargs())
            settings = {**SERVER_SETTINGS, **(MONITOR_SETTINGS if self.monitor else {})}
            with (self.pgdata / "postgresql.auto.conf").open("a") as conf:
                conf.writelines(f"{key} = '{value}'\n" for key, value in settings.items())

    def _command(self) -> list[str]:
        binary, pgdata = self.formation.binary, str(self.pgdata)
        if self.created:
            return [binary, "run", "--pgdata", pgdata]
        node = ["monitor"] if self.monitor else [
            "postgres", "--name", self.name, "--monitor", self.formation.monitor_uri,
        ]  # fmt: skip
        return [
            binary, "create", *node, "--pgdata", pgdata, "--pgport", str(self.port),
            "--hostname", HOST, "--listen", HOST, "--auth", "trust", "--no-ssl", "--run",
        ]  # fmt: skip

    def _popen_kwargs(self) -> dict[str, Any]:
        kwargs = _as_account(self.formation.account)
        # NOTE: pg_autoctl keeps its configuration and state under the XDG directories (else
        # in the account's home); each node's in its own temp dir.
        kwargs["env"] = {
            **kwargs.get("env", os.environ),
            "PATH": f"{self.formation.bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PG_CONFIG": str(self.formation.bindir / "pg_config"),
            "XDG_CONFIG_HOME": str(self.tmpdir / "config"),
            "XDG_DATA_HOME": str(self.tmpdir / "share"),
            "XDG_RUNTIME_DIR": str(self.tmpdir / "run"),
        }
        return kwargs

    def _ping(self) -> bool:
        if not postgres_answers(self.url):
            return False
        self.created = True
        return True

    def _processes(self) -> set[int]:
        # NOTE: the supervisor's session: what it started lives on if it dies alone.
        if self._proc is None or self._tmp is None:
            return set()
        return _tree(self._proc.pid, self._tmp.resolve())

    def _after_exit(self, leftovers: set[int]) -> None:
        # NOTE: a Postgres (or backend) the supervisor left behind holds the port and the shared
        # memory the next start needs; only processes of this node's tree are signalled.
        _reap(leftovers, ("postgres", "pg_autoctl"))


class AutoFailover(Started):
    """A pg_auto_failover formation: a monitor, a primary and ``standbys`` standbys, each node a
    process tree of its own (``kill()`` one: a crash of its host; ``start()`` it again: it comes
    back as a standby). Replication is synchronous while a standby is ``secondary`` (the
    formation's ``number_sync_standbys`` 0 and the standbys' ``replication-quorum`` true,
    pg_auto_failover's defaults); ``replication_quorum(node, False)`` makes it asynchronous.

    Raises ``ServerUnavailable`` (``PGAF_MISSING``) where pg_autoctl is not installed.
    """

    def __init__(self, *, standbys: int = 1, startup_timeout: float = 60.0) -> None:
        binary = pg_autoctl_binary()
        if binary is None:
            raise ServerUnavailable(PGAF_MISSING)
        self.binary = binary
        self.bindir = _pg_bindir()
        self.account = _unprivileged("pg_autoctl")
        self.user = self.account.pw_name if self.account else _current_user()
        self.startup_timeout = startup_timeout
        self.nodes: list[AutoctlNode] = []
        self.monitor = AutoctlNode(self, "monitor", monitor=True)
        self.nodes = [AutoctlNode(self, f"node{i + 1}") for i in range(1 + standbys)]

    @property
    def monitor_uri(self) -> str:
        return (
            f"postgres://autoctl_node@{HOST}:{self.monitor.port}/pg_auto_failover?sslmode=disable"
        )

    def url(self, dbname: str = "postgres") -> str:
        """libpq's multi-host URL of ``dbname`` on every node, taking the one that takes writes
        (``target_session_attrs=read-write``), 2 s to connect to each."""
        hosts = ",".join(f"{HOST}:{node.port}" for node in self.nodes)
        return (
            f"postgres://{self.user}@{hosts}/{dbname}"
            "?target_session_attrs=read-write&connect_timeout=2"
        )

    def start(self) -> Self:
        """``start_primary()`` then ``start_standbys()``; everything stopped if either fails."""
        try:
            self.start_primary()
            self.start_standbys()
        except BaseException:
            self.cleanup()
            raise
        return self

    def start_primary(self) -> AutoctlNode:
        """Start the monitor and the first node, alone (``single``: no replication yet)."""
        self.monitor.start()
        first = self.nodes[0]
        first.start()
        self.wait_states({first.name: "single"})
        return first

    def start_standbys(self) -> None:
        """Start each other node (pg_autoctl makes it a base backup of the primary); wait until
        the primary is ``primary`` and every standby ``secondary``."""
        first, *others = self.nodes
        for node in others:
            node.start()
        self.wait_states({first.name: "primary", **{node.name: "secondary" for node in others}})

    def states(self) -> dict[str, tuple[str, str]]:
        """``{node name: (reported state, goal state)}`` as the monitor has them."""
        rows = self.monitor.sql(
            "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node"
        )
        return {name: (reported, goal) for name, reported, goal in rows}

    def wait_states(self, expected: Mapping[str, str], timeout: float | None = None) -> None:
        """Wait until each named node reports, and has as its goal, the state given."""
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        states: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                states = self.states()
                if all(states.get(name) == (state, state) for name, state in expected.items()):
                    return
            time.sleep(0.1)
        raise ServerUnavailable(f"the formation did not reach {dict(expected)}: {states}")

    def primary(self) -> AutoctlNode | None:
        """The node the monitor has as the primary now (reported and goal), or None."""
        with contextlib.suppress(Exception):
            for name, (reported, goal) in self.states().items():
                if reported == goal and reported in WRITABLE:
                    return next(node for node in self.nodes if node.name == name)
        return None

    def wait_primary(self, other_than: AutoctlNode, timeout: float = 60.0) -> AutoctlNode:
        """Wait until a node other than ``other_than`` is the primary and takes writes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = self.primary()
            if node is not None and node is not other_than:
                with contextlib.suppress(Exception):
                    if not node.sql("SELECT pg_is_in_recovery()")[0][0]:
                        return node
            time.sleep(0.05)
        raise ServerUnavailable(f"no standby was promoted within {timeout:g}s: {self.states()}")

    def synchronous(self, node: AutoctlNode) -> bool:
        """Whether ``node`` (a primary) waits for a standby's acknowledgement of each commit."""
        names = node.sql("SHOW synchronous_standby_names")[0][0]
        states = {state for (state,) in node.sql("SELECT sync_state FROM pg_stat_replication")}
        return bool(names) and bool(states & {"sync", "quorum"})

    def wait_synchronous(self, timeout: float = 30.0) -> AutoctlNode:
        """Wait until the primary replicates synchronously; return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = self.primary()
            with contextlib.suppress(Exception):
                if node is not None and self.synchronous(node):
                    return node
            time.sleep(0.1)
        raise ServerUnavailable(f"replication did not become synchronous: {self.states()}")

    def replication_quorum(self, node: AutoctlNode, value: bool) -> None:
        """Whether the primary waits for ``node`` (a standby) to commit: pg_auto_failover's
        ``replication-quorum``; false is asynchronous replication."""
        node.autoctl("set", "node", "replication-quorum", "true" if value else "false")

    def cleanup(self) -> None:
        """Kill every node, then the monitor (each by PID), and remove their temp dirs."""
        # NOTE: killed, not shut down: nothing of a throwaway formation is kept, and pg_autoctl's
        # orderly stop takes seconds a node.
        for node in [*self.nodes, self.monitor]:
            with contextlib.suppress(Exception):
                node.kill()
                node.cleanup()


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


# --- a failover under two app instances' load ---------------------------------------------

# Seconds a request may take (the client's timeout): the app answers within it or it hangs.
REQUEST_TIMEOUT = 10.0
# Seconds a client waits after a failed request before its next one.
BACKOFF = 0.1


@dataclass
class WriteLoad:
    """Each instance's client writing turns (to one shared owner), facts and forgets as fast as
    answered, and after each acknowledged turn reading the other instance's context until it
    shows the turn. Records what was acknowledged, every other answer, and every stale read."""

    stack: AppStack
    owner: str
    # (sent, acknowledged, content) of each turn answered 201
    acked: list[tuple[float, float, str]] = field(default_factory=list)
    tried: set[str] = field(default_factory=set)
    # fact key -> values acknowledged, in order; and every value tried
    facts: dict[str, list[int]] = field(default_factory=dict)
    facts_tried: dict[str, set[int]] = field(default_factory=dict)
    # owners whose forget was answered 204
    forgotten: list[str] = field(default_factory=list)
    # (sent, status, Retry-After, method path) of each answer that was not a success
    failed: list[tuple[float, int, str | None, str]] = field(default_factory=list)
    # seconds each request took
    took: list[float] = field(default_factory=list)
    # seconds from a turn's acknowledgement until the other instance's read showed it
    visible_after: list[float] = field(default_factory=list)
    # reads answered 200 without a turn acknowledged before they were sent
    stale: list[tuple[int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def call(self, i: int, method: str, path: str, body: object = None) -> tuple[int, Any]:
        """Instance ``i``'s answer: (status, decoded body); status 0 if it did not answer."""
        sent = time.monotonic()
        try:
            answer = self.stack.request(i, method, path, body, timeout=REQUEST_TIMEOUT)
        except OSError as e:  # a hang past the client's timeout, or a reset connection
            self.failed.append((sent, 0, repr(e), f"{method} {path}"))
            return 0, None
        finally:
            self.took.append(time.monotonic() - sent)
        if answer.status >= 300:
            retry = answer.headers_retry_after
            self.failed.append((sent, answer.status, retry, f"{method} {path}"))
            time.sleep(BACKOFF)
        return answer.status, answer.data

    def run(self, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            content = f"turn {i}-{n}"
            self.tried.add(content)
            sent = time.monotonic()
            body = {"session_id": f"tab-{i}", "role": "user", "content": content}
            if self.call(i, "POST", f"/api/memory/users/{self.owner}/turns/", body)[0] == 201:
                acked = time.monotonic()
                self.acked.append((sent, acked, content))
                self.read_until_shown(1 - i, content, acked)
            key = f"count-{i}"
            self.facts_tried.setdefault(key, set()).add(n)
            path = f"/api/memory/users/{self.owner}/facts/{key}/"
            if self.call(i, "PUT", path, {"value": n})[0] in (200, 201):
                self.facts.setdefault(key, []).append(n)
            if n % 4 == 0:
                scratch = f"gone-{i}-{n}-{uuid.uuid4().hex[:6]}"
                body = {"session_id": "s", "role": "user", "content": "to forget"}
                if (
                    self.call(i, "POST", f"/api/memory/users/{scratch}/turns/", body)[0] == 201
                    and self.call(i, "DELETE", f"/api/memory/users/{scratch}/")[0] == 204
                ):
                    self.forgotten.append(scratch)

    def read_until_shown(self, i: int, content: str, acked: float) -> None:
        path = f"/api/memory/users/{self.owner}/context/?turns=50"
        while time.monotonic() - acked < 30:
            status, data = self.call(i, "GET", path)
            if status == 200:
                if content in [t["content"] for t in data["turns"]]:
                    self.visible_after.append(time.monotonic() - acked)
                    return
                self.stale.append((i, content))
                time.sleep(0.02)
        self.stale.append((i, content))


@dataclass
class Failover:
    """What ``failover_under_load()`` did and measured (seconds after the kill)."""

    load: WriteLoad
    old: AutoctlNode
    new: AutoctlNode
    killed_at: float
    promoted: float
    first_write: float
    rejoined: float

    @property
    def failed(self) -> list[tuple[float, int, str | None, str]]:
        """The requests that failed from the kill on (sent at most 0.5 s before it)."""
        return [f for f in self.load.failed if f[0] >= self.killed_at - 0.5]

    def __str__(self) -> str:
        load, visible = self.load, sorted(self.load.visible_after)
        return (
            f"{len(load.acked)} turns, {sum(map(len, load.facts.values()))} facts and "
            f"{len(load.forgotten)} forgets acknowledged; the standby promoted "
            f"{self.promoted:.2f} s after the kill, the first write acknowledged "
            f"{self.first_write:.2f} s after it, the old primary a standby {self.rejoined:.2f} s "
            f"after it; {len(self.failed)} requests failed "
            f"({sorted({f[1] for f in self.failed})}, clients retrying after {BACKOFF} s); reads "
            f"of the other instance showed a turn {visible[-1]:.2f} s after its "
            f"acknowledgement at most (median {visible[len(visible) // 2]:.3f} s); "
            f"{len(load.stale)} stale reads; slowest request {max(load.took):.2f} s"
        )


def failover_under_load(
    formation: AutoFailover, stack: AppStack, owner: str, *, before: float = 1.5
) -> Failover:
    """Two clients' ``WriteLoad`` on ``stack``'s instances (one each); ``before`` seconds into
    it the primary killed (its host's crash), the engine's promotion awaited, then a write
    acknowledged, then the old primary started again until it is a synchronous standby."""
    old = formation.wait_synchronous()
    load = WriteLoad(stack, owner)
    threads = [threading.Thread(target=load.run, args=(i,)) for i in range(stack.instances)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(before)
        old.kill()
        # NOTE: from here on the old primary answers nothing (its processes were stopped, then
        # killed, a moment before).
        killed = time.monotonic()
        new = formation.wait_primary(other_than=old)
        promoted = time.monotonic()
        deadline = promoted + 20
        while not any(sent > killed for sent, _, _ in load.acked):
            if time.monotonic() > deadline:
                raise AssertionError("no write was acknowledged after the promotion")
            time.sleep(0.05)
        first_write = min(at for sent, at, _ in load.acked if sent > killed)
        # The old primary's host is back: pg_auto_failover makes it a standby of the new one
        # (pg_rewind), and replication is synchronous again.
        old.start()
        formation.wait_states({old.name: "secondary", new.name: "primary"})
        rejoined = time.monotonic()
        if formation.wait_synchronous() is not new:
            raise AssertionError("the new primary is not the one replicating synchronously")
        time.sleep(0.5)
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(timeout=60)
    return Failover(
        load=load,
        old=old,
        new=new,
        killed_at=killed,
        promoted=promoted - killed,
        first_write=first_write - killed,
        rejoined=rejoined - killed,
    )
