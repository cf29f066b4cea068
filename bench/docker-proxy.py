#!/usr/bin/env python3
"""A counting proxy for the Docker API: listens on 127.0.0.1:PORT, forwards every byte to the
daemon's Unix socket, and appends one line per HTTP request ("METHOD /path") to LOG.

It parses only the client's side of each connection, enough to find where one request ends and
the next begins on a kept-alive connection (Content-Length or chunked bodies). After a request
that upgrades the connection (exec start, attach), the rest is a raw stream and is only relayed.
Usage: docker-proxy.py PORT LOG [SOCKET]
"""

import asyncio
import sys

PORT = int(sys.argv[1])
LOG = sys.argv[2]
SOCKET = sys.argv[3] if len(sys.argv) > 3 else "/var/run/docker.sock"


def record(line: str) -> None:
    # One write per request, flushed at once, so that the benchmark script can read the log
    # as soon as the client has exited.
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(line + "\n")


async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass


async def requests(client: asyncio.StreamReader, daemon: asyncio.StreamWriter) -> None:
    """Relays the client's requests one by one, recording each."""
    try:
        while True:
            head = await client.readuntil(b"\r\n\r\n")
            daemon.write(head)
            lines = head.decode("latin-1").split("\r\n")
            method, target = lines[0].split(" ")[:2]
            record(f"{method} {target.split('?')[0]}")
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    key, value = line.split(":", 1)
                    headers[key.strip().lower()] = value.strip().lower()
            if "upgrade" in headers.get("connection", ""):
                break
            if headers.get("transfer-encoding") == "chunked":
                while True:
                    size_line = await client.readuntil(b"\r\n")
                    daemon.write(size_line)
                    size = int(size_line.split(b";")[0], 16)
                    daemon.write(await client.readexactly(size + 2))
                    if size == 0:
                        break
            else:
                length = int(headers.get("content-length", "0"))
                if length:
                    daemon.write(await client.readexactly(length))
            await daemon.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        try:
            daemon.write_eof()
        except (OSError, RuntimeError):
            pass
        return
    await relay(client, daemon)


# asyncio keeps only weak references to the tasks start_server spawns: without a strong one, an
# idle kept-alive connection's task can be garbage-collected while it waits.
CONNECTIONS: set = set()


async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
    task = asyncio.current_task()
    CONNECTIONS.add(task)
    try:
        await forward(client_reader, client_writer)
    finally:
        CONNECTIONS.discard(task)


async def forward(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
    daemon_reader, daemon_writer = await asyncio.open_unix_connection(SOCKET)
    try:
        await asyncio.gather(
            requests(client_reader, daemon_writer),
            relay(daemon_reader, client_writer),
        )
    finally:
        for w in (client_writer, daemon_writer):
            w.close()


async def main() -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", PORT, limit=1 << 20)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
