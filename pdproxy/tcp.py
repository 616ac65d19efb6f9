"""Socket options both sides of the proxy want."""

import socket


def set_nodelay(transport) -> None:
    """Small request and SSE writes go out at once instead of waiting on Nagle + delayed ACK (~40 ms)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
