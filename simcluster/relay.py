"""Byte relay between a TCP port and a Unix socket: how the namespaced Mooncake client reaches the master.

  main namespace:    python -m simcluster.relay --unix PATH --tcp 127.0.10.7:50051   (unix -> tcp)
  inside `unshare -n`: python -m simcluster.relay --listen-tcp 127.0.0.1:50051 --unix PATH   (tcp -> unix)
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


async def unix_to_tcp(path: str, host: str, port: int) -> None:
    if os.path.exists(path):
        os.unlink(path)
    server = await asyncio.start_unix_server(_bridge(lambda: asyncio.open_connection(host, port)), path)
    async with server:
        await server.serve_forever()


async def tcp_to_unix(host: str, port: int, path: str) -> None:
    server = await asyncio.start_server(_bridge(lambda: asyncio.open_unix_connection(path)), host, port)
    print(f"relay listening on {host}:{port}", flush=True)
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
