"""Tests of the async read's own reply parser (``memory.cache.wire.replies_read``): the replies a
real Redis sends, in RESP2 and RESP3, parsed as redis-py's own parser parses them, however the
bytes are cut on their way; and ``acommands_run`` on it, with a server that stops mid-reply."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis import exceptions as redis_errors
from redis._parsers import _AsyncRESP2Parser, _AsyncRESP3Parser
from redis._parsers.encoders import Encoder
from redis.asyncio import ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from memory.cache import wire
from memory.cache.wire import AsyncConnections, acommands_run, replies_read
from tests.servers import RedisServer

# Groups of commands, each group's replies read as one: every kind of reply either protocol has.
GROUPS: list[list[tuple[Any, ...]]] = [
    [("SET", "s", "value"), ("GET", "s"), ("GET", "missing")],
    [("HSET", "h", "a", "1", "b", ""), ("HMGET", "h", "a", "b", "c"), ("EXPIRE", "h", 60)],
    [("HGETALL", "h"), ("SADD", "set", "x", "y"), ("SMEMBERS", "set")],
    [("ZADD", "z", "1.5", "m"), ("ZSCORE", "z", "m"), ("INCRBYFLOAT", "f", "0.25")],
    [("EVAL", "return {1, 'two', {3, false}, true, nil}", 0), ("EVAL", "return 'x'", 0)],
    [("EVAL", "redis.setresp(3) return redis.call('HGETALL', KEYS[1])", 1, "h")],
    [("EVAL", "return 3.75", 0), ("EVAL", "redis.setresp(3) return {double = 2.5}", 0)],
    [("INCR", "s"), ("PING",), ("HGET", "set", "x")],  # two errors among the replies
    [("EVALSHA", "0" * 40, 0)],  # NOSCRIPT: redis-py's NoScriptError
    [("SET", "big", "b" * 300_000), ("GET", "big"), ("STRLEN", "big")],
    [("LPUSH", "l", *[f"item {i}" for i in range(2_000)]), ("LRANGE", "l", 0, -1)],
    [("DEBUG", "PROTOCOL", "bignum"), ("DEBUG", "PROTOCOL", "verbatim")],
    [("DEBUG", "PROTOCOL", "true"), ("DEBUG", "PROTOCOL", "null")],
    [("DEBUG", "PROTOCOL", "attrib")],
]


def _raw_replies(port: int, protocol: int) -> Iterator[tuple[list[tuple[Any, ...]], bytes]]:
    """Each group and the exact bytes of its replies, from a socket of one protocol."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(5)
    packer = redis.Connection()
    try:
        if protocol == 3:
            sock.sendall(b"".join(packer.pack_command("HELLO", 3)))
            assert sock.recv(65536).startswith(b"%")
        for group in GROUPS:
            sock.sendall(b"".join(b"".join(packer.pack_command(*c)) for c in group))
            sock.sendall(b"".join(packer.pack_command("ECHO", "end-of-group")))
            got = b""
            marker = b"$12\r\nend-of-group\r\n"
            while not got.endswith(marker):
                chunk = sock.recv(1 << 20)
                assert chunk
                got += chunk
            yield group, got[: -len(marker)]
    finally:
        sock.close()


def _cuts(data: bytes) -> list[int]:
    """Where to cut ``data`` in two: every byte of a short reply, else spread over it."""
    if len(data) <= 400:
        return list(range(len(data) + 1))
    return sorted({0, 1, 2, len(data) - 1, len(data), *range(0, len(data), len(data) // 97)})


def _stream(pieces: list[bytes], *, end: bool) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for piece in pieces:
        if piece:
            reader.feed_data(piece)
    if end:
        reader.feed_eof()
    return reader


def _parsed(pieces: list[bytes], n: int) -> list[Any]:
    """``replies_read`` of a stream that holds ``pieces``, then ends."""

    async def main() -> list[Any]:
        error = _AsyncRESP3Parser(65536).parse_error
        return await replies_read(_stream(pieces, end=True), n, error)

    return asyncio.run(main())


async def _redis_pys(data: bytes, n: int, protocol: int) -> list[Any]:
    parser = (_AsyncRESP3Parser if protocol == 3 else _AsyncRESP2Parser)(65536)
    parser._stream = _stream([data], end=True)
    parser.encoder = Encoder("utf-8", "strict", False)
    parser._connected = True
    return [await parser.read_response() for _ in range(n)]


def _same(ours: list[Any], theirs: list[Any]) -> bool:
    """Equal, an error equal by its class and text."""
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs, strict=True):
        if isinstance(b, Exception):
            if type(a) is not type(b) or a.args != b.args:
                return False
        elif a != b or type(a) is not type(b):
            return False
    return True


@pytest.fixture(scope="module")
def debug_redis() -> Iterator[RedisServer]:
    """A redis-server of this module's own that answers DEBUG PROTOCOL (every RESP3 type)."""
    with RedisServer(extra_args=["--enable-debug-command", "local"]) as server:
        yield server


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_replies_of_every_kind_parse_as_redis_pys_parser_parses_them(debug_redis, protocol):
    error = _AsyncRESP3Parser(65536).parse_error
    for group, data in _raw_replies(debug_redis.port, protocol):
        # NOTE: DEBUG PROTOCOL's attribute reply is not one redis-py parses either.
        if group[0][:3] == ("DEBUG", "PROTOCOL", "attrib"):
            if protocol == 3:
                with pytest.raises(redis_errors.InvalidResponse):
                    _parsed([data], 1)
            continue
        theirs = asyncio.run(_redis_pys(data, len(group), protocol))

        async def cut_at(at: int, d: bytes = data, n: int = len(group)) -> list[Any]:
            reader = asyncio.StreamReader()
            reader.feed_data(d[:at]) if at else None

            async def later() -> None:
                await asyncio.sleep(0)
                reader.feed_data(d[at:]) if at < len(d) else None

            fed = asyncio.create_task(later())
            try:
                return await replies_read(reader, n, error)
            finally:
                await fed

        for at in _cuts(data):
            ours = asyncio.run(cut_at(at))
            assert _same(ours, theirs), (group[0], protocol, at)


def test_a_stream_that_ends_inside_a_reply_or_holds_more_is_an_error():
    whole = b"*2\r\n$3\r\nabc\r\n:7\r\n"
    assert _parsed([whole], 1) == [[b"abc", 7]]
    for at in range(len(whole)):
        with pytest.raises(redis_errors.ConnectionError):
            _parsed([whole[:at]], 1)
    with pytest.raises(redis_errors.InvalidResponse):
        _parsed([whole + b"+OK\r\n"], 1)
    for junk in (b"?what\r\n", b"$x\r\n", b":1.5\r\n", b"%1\r\n*1\r\n:1\r\n:2\r\n"):
        with pytest.raises(redis_errors.InvalidResponse):
            _parsed([junk], 1)
    # A push before the reply is not a reply; a server's connection error is raised.
    push = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
    assert _parsed([push + b"+OK\r\n"], 1) == [b"OK"]
    with pytest.raises(redis_errors.BusyLoadingError):
        _parsed([b"-LOADING busy\r\n"], 1)


def _connections(url: str, protocol: int = 3) -> tuple[ConnectionPool, Any]:
    pool = ConnectionPool.from_url(
        url, protocol=protocol, retry=Retry(NoBackoff(), 0), driver_info=None
    )
    return pool, AsyncConnections(pool, None)


def test_acommands_run_reads_its_replies_itself_and_keeps_its_connection_in_step(own_redis):
    async def main() -> list[Any]:
        pool, connections = _connections(own_redis.url)
        try:
            answers = [await acommands_run(connections, [("SET", "k", "v"), ("GET", "k")])]
            with pytest.raises(redis_errors.ResponseError):
                await acommands_run(connections, [("INCR", "k"), ("GET", "k")])
            answers.append(await acommands_run(connections, [("GET", "k"), ("PING",)]))
            return answers
        finally:
            await pool.disconnect()

    def unused(connection: Any) -> Any:
        raise AssertionError("redis-py's reply parser was used")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(wire, "_areply", unused)
        assert asyncio.run(main()) == [[b"OK", b"v"], [b"v", b"PONG"]]


def test_a_read_cut_off_mid_reply_closes_its_connection_and_the_next_call_connects_again():
    """A server that sends half a reply and stops: the watch's cancellation closes the
    connection, and one that closes mid-reply is redis-py's ConnectionError."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    mode = ["half"]

    def serve() -> None:
        while True:
            try:
                peer, _ = server.accept()
            except OSError:
                return
            try:
                while True:
                    got = peer.recv(65536)
                    if not got:
                        break
                    if mode[0] == "half":
                        peer.sendall(b"*2\r\n$3\r\nab")
                    elif mode[0] == "close":
                        peer.sendall(b"*2\r\n$3\r\nab")
                        break
                    else:
                        peer.sendall(b"+PONG\r\n")
            finally:
                peer.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def main() -> None:
        # NOTE: RESP2 and no client name: nothing is sent on connecting to this server.
        pool, connections = _connections(f"redis://127.0.0.1:{port}", protocol=2)
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await acommands_run(connections, [("GET", "k")])
            assert not connections.idle  # not kept: out of step
            mode[0] = "close"
            with pytest.raises(redis_errors.ConnectionError):
                await acommands_run(connections, [("GET", "k")])
            mode[0] = "pong"
            assert await acommands_run(connections, [("PING",)]) == [b"PONG"]
        finally:
            await pool.disconnect()

    try:
        asyncio.run(main())
    finally:
        server.close()
