"""Byte relay between a TCP port and a Unix socket: how a namespaced Mooncake client reaches the master.

  main namespace:      unix -> tcp, `unix_to_tcp` (the engine runs it in its own event loop; or
                       python -m simcluster.relay --unix PATH --tcp 127.0.10.7:50051)
  inside the namespace: python -m simcluster.relay --listen-tcp 127.0.0.1:0 --unix PATH   (tcp -> unix; prints
                       "relay listening on HOST:PORT" with the port it got)
The inside relay must be its own process: Mooncake's setup() holds the GIL while it waits for the
master, so a relay thread in the agent's process would deadlock it (seen).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def _bridge(open_far):
    async def handle(reader, writer):
        try:
            far_reader, far_writer = await open_far()
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, far_writer), _pipe(far_reader, writer))
    return handle


async def start_unix_to_tcp(path: str, host: str, port: int) -> asyncio.AbstractServer:
    if os.path.exists(path):
        os.unlink(path)
    return await asyncio.start_unix_server(_bridge(lambda: asyncio.open_connection(host, port)), path)


async def unix_to_tcp(path: str, host: str, port: int) -> None:
    server = await start_unix_to_tcp(path, host, port)
    async with server:
        await server.serve_forever()


async def tcp_to_unix(host: str, port: int, path: str) -> None:
    server = await asyncio.start_server(_bridge(lambda: asyncio.open_unix_connection(path)), host, port)
    bound = server.sockets[0].getsockname()[1]  # port 0 asks for any free port
    print(f"relay listening on {host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="simcluster.relay")
    parser.add_argument("--unix", required=True)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--tcp", help="listen on --unix, connect to this host:port")
    target.add_argument("--listen-tcp", help="listen on this host:port, connect to --unix")
    args = parser.parse_args(argv)
    if args.tcp:
        host, port = args.tcp.rsplit(":", 1)
        asyncio.run(unix_to_tcp(args.unix, host, int(port)))
    else:
        host, port = args.listen_tcp.rsplit(":", 1)
        asyncio.run(tcp_to_unix(host, int(port), args.unix))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
