"""The HTTP rows' machinery: a gunicorn server on loopback with the bench settings, and a load
generator (``wrk`` when it is on PATH, else a keep-alive asyncio client) for a bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.servers import free_port

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ServerSettings:
    """How gunicorn runs, the same for the project's views and the bare baseline."""

    workers: int = 2
    threads: int = 4
    worker_class: str = "gthread"

    def describe(self) -> str:
        return f"gunicorn {self.worker_class}, {self.workers} workers x {self.threads} threads"


@contextlib.contextmanager
def gunicorn(settings: ServerSettings) -> Iterator[str]:
    """Serve ``memoryproj.wsgi`` with ``DJANGO_SETTINGS_MODULE=bench.settings``; yield its URL."""
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    log = tempfile.NamedTemporaryFile(prefix="bench-gunicorn-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "memoryproj.wsgi:application",
            "--bind", f"{HOST}:{port}",
            "--workers", str(settings.workers),
            "--worker-class", settings.worker_class,
            "--threads", str(settings.threads),
            "--keep-alive", "30",
            "--backlog", "512",
            "--log-level", "warning",
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited: {Path(log.name).read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/memory/health/", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not answer: {Path(log.name).read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        os.unlink(log.name)


@dataclass(frozen=True)
class Load:
    """One load: requests cycling over ``paths``, all with the same method, headers and body."""

    method: str
    paths: tuple[str, ...]
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""


@dataclass(frozen=True)
class LoadResult:
    requests_per_second: float
    requests: int
    bad: int


def generator() -> str:
    """The load generator: ``BENCH_LOAD`` (``wrk`` or ``python``), else ``wrk`` when on PATH."""
    chosen = os.environ.get("BENCH_LOAD", "").strip()
    if chosen in ("wrk", "python"):
        return chosen
    return "wrk" if shutil.which("wrk") else "python"


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _wrk(url: str, load: Load, *, seconds: float, connections: int) -> LoadResult:
    paths = ", ".join(_lua_string(path) for path in load.paths)
    headers = "\n".join(
        f"wrk.headers[{_lua_string(name)}] = {_lua_string(value)}" for name, value in load.headers
    )
    script = f"""
wrk.method = {_lua_string(load.method)}
wrk.body = {_lua_string(load.body.decode())}
{headers}
local paths = {{{paths}}}
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format(nil, paths[i])
end
"""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as file:
        file.write(script)
    try:
        result = subprocess.run(
            [
                "wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s",
                "--timeout", "5s", "-s", file.name, url,
            ],
            capture_output=True,
            text=True,
            check=True,
        )  # fmt: skip
    finally:
        os.unlink(file.name)
    out = result.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = 0
    if match := re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out):
        bad += int(match.group(1))
    errors = r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)"
    if match := re.search(errors, out):
        bad += sum(int(n) for n in match.groups())
    return LoadResult(requests_per_second=rps, requests=total, bad=bad)


async def _response_read(reader: asyncio.StreamReader) -> int:
    """Read one HTTP/1.1 response (its body by ``Content-Length``); return its status."""
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


async def _python_load(url: str, load: Load, *, seconds: float, connections: int) -> LoadResult:
    host, port = url.removeprefix("http://").split(":")
    head = "".join(f"{name}: {value}\r\n" for name, value in load.headers)
    requests = [
        (
            f"{load.method} {path} HTTP/1.1\r\nHost: {host}\r\n{head}"
            f"Content-Length: {len(load.body)}\r\n\r\n"
        ).encode()
        + load.body
        for path in load.paths
    ]
    counts = [0, 0]
    stop_at = time.monotonic() + seconds

    async def client(start: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        i = start
        try:
            while time.monotonic() < stop_at:
                writer.write(requests[i % len(requests)])
                i += 1
                status = await _response_read(reader)
                counts[0] += 1
                if status >= 400:
                    counts[1] += 1
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(client(n) for n in range(connections)))
    elapsed = time.monotonic() - started
    return LoadResult(requests_per_second=counts[0] / elapsed, requests=counts[0], bad=counts[1])


# NOTE: the kinds of process whose CPU time ProcessCPU tells apart, by their command line.
_KINDS = (("gunicorn", "gunicorn"), ("postgres", "postgres"), ("redis", "redis-server"))


class ProcessCPU:
    """CPU time (user and system) of the machine's processes by kind, read from ``/proc``
    (Linux only): the server under test (``gunicorn``), ``postgres``, ``redis``, this load
    generator (``load``, with ``wrk`` if it runs) and ``other`` (the kernel's own threads
    among them). ``since(before)`` is each kind's seconds from the ``snapshot()`` before."""

    available = Path("/proc/self/stat").exists()

    @staticmethod
    def snapshot() -> dict[int, tuple[str, int]]:
        own = os.getpid()
        found: dict[int, tuple[str, int]] = {}
        for entry in Path("/proc").iterdir() if ProcessCPU.available else ():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                command = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue  # NOTE: the process ended meanwhile
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            pid = int(entry.name)
            if pid == own or name == "wrk":
                kind = "load"
            else:
                kind = next((k for k, mark in _KINDS if mark in command or mark in name), "other")
            found[pid] = (kind, int(fields[11]) + int(fields[12]))
        return found

    @staticmethod
    def since(before: dict[int, tuple[str, int]]) -> dict[str, float]:
        tick = os.sysconf("SC_CLK_TCK")
        seconds: dict[str, float] = {}
        for pid, (kind, ticks) in ProcessCPU.snapshot().items():
            used = ticks - before[pid][1] if pid in before else ticks
            seconds[kind] = seconds.get(kind, 0.0) + used / tick
        return seconds


def run_load(url: str, load: Load, *, seconds: float, connections: int) -> LoadResult:
    """Drive ``load`` against ``url`` with ``connections`` keep-alive connections."""
    if generator() == "wrk":
        return _wrk(url, load, seconds=seconds, connections=connections)
    return asyncio.run(_python_load(url, load, seconds=seconds, connections=connections))


@dataclass(frozen=True)
class MixedLoad:
    """A load over many owners: each request reads (``reads[i]``, a whole HTTP request) or
    writes (``writes[i]``) the owner ``i`` drawn by ``cum_weights``, reads ``read_share`` of
    the time."""

    reads: tuple[bytes, ...]
    writes: tuple[bytes, ...]
    cum_weights: tuple[float, ...]
    read_share: float = 0.9


@dataclass
class MixedResult:
    """Each request's seconds, how many failed, and the load's length in seconds."""

    latencies: list[float]
    bad: int
    seconds: float

    def percentile(self, share: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def zipf_weights(count: int, exponent: float = 1.0) -> tuple[float, ...]:
    """Cumulative weights of ``count`` ranks under Zipf's law: rank ``i`` drawn in proportion
    to ``1 / i ** exponent``."""
    total = 0.0
    cumulative = []
    for rank in range(1, count + 1):
        total += 1.0 / rank**exponent
        cumulative.append(total)
    return tuple(cumulative)


def http_request(method: str, url: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """The bytes of one keep-alive HTTP/1.1 request to ``url``'s host."""
    host = url.removeprefix("http://")
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{head}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _mixed(urls: list[str], load: MixedLoad, seconds: float, connections: int) -> MixedResult:
    import bisect
    import random

    latencies: list[float] = []
    bad = [0]
    stop_at = time.monotonic() + seconds
    top = load.cum_weights[-1]

    async def client(number: int) -> None:
        host, port = urls[number % len(urls)].removeprefix("http://").split(":")
        rnd = random.Random(number)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.monotonic() < stop_at:
                owner = bisect.bisect_left(load.cum_weights, rnd.random() * top)
                read = rnd.random() < load.read_share
                started = time.perf_counter()
                writer.write((load.reads if read else load.writes)[owner])
                status = await _response_read(reader)
                latencies.append(time.perf_counter() - started)
                if status >= 400:
                    bad[0] += 1
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(client(n) for n in range(connections)))
    return MixedResult(latencies=latencies, bad=bad[0], seconds=time.monotonic() - started)


def run_mixed(urls: list[str], load: MixedLoad, *, seconds: float, connections: int) -> MixedResult:
    """Drive ``load`` against the servers ``urls`` (connections spread over them in turn), from
    this process's event loop, timing every request."""
    return asyncio.run(_mixed(urls, load, seconds, connections))
