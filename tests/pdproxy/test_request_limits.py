"""Exhaustion without a token: pipelined bodies wait in the kernel, oversized heads get 431/414, bodies 413."""

import json
import socket
import time

import pytest

from tests.pdproxy.proxy_procs import completion

pytestmark = pytest.mark.procs  # every test here starts processes or servers

MIB = 1 << 20


class RawClient:
    """One client connection on a raw socket: what is sent is exactly what the test wrote."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def _take_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError("connection closed inside a response")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError("connection closed inside a response body")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """(status, lower-cased headers, body) of the next answer on this connection."""
        status = int(self._take_line().split()[1])
        headers = {}
        while line := self._take_line():
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            return status, headers, self._take(int(headers["content-length"]))
        body = b""
        while size := int(self._take_line().split(b";")[0], 16):
            body += self._take(size)
            self._take_line()
        self._take_line()
        return status, headers, body

    def closed_by_peer(self) -> bool:
        try:
            return self.buf == b"" and not self._fill()
        except ConnectionResetError:
            return True


def post(path: str, body: bytes, *headers: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: proxy", "Content-Type: application/json",
            f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def get(path: str, *headers: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: proxy", *headers]) + "\r\n\r\n").encode()


def proc_status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def test_pipelined_big_bodies_wait_in_the_kernel_not_in_the_proxy(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    p.fault("hang", legs=["prefill"])  # the first request stays in flight; the rest are pipelined behind it
    one = post("/v1/completions", json.dumps(completion(prompt="x" * MIB)).encode())
    rss_before = proc_status_kib(proxy.proc.pid, "VmRSS")
    client = RawClient(proxy.port, timeout=1.0)
    sent = 0
    try:
        for _ in range(200):
            client.sock.sendall(one)
            sent += 1
    except TimeoutError:
        pass  # the proxy stopped reading: the rest waits in the kernel's socket buffers
    time.sleep(0.5)  # whatever the proxy was going to read, it has read now
    growth_mib = (proc_status_kib(proxy.proc.pid, "VmHWM") - rss_before) / 1024
    client.close()
    # before the fix every body was read and queued: 200 x 1 MiB held ~199 MiB
    assert growth_mib < 40, f"proxy peak RSS grew {growth_mib:.0f} MiB while {sent} MiB bodies were pipelined"
    assert sent < 200, "the client pushed every body: nobody held it back"


def test_pipelined_and_keep_alive_requests_get_every_answer_in_order(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1", chunks=4, token_delay=0.002)
    proxy = cluster.proxy([p], [d])
    client = RawClient(proxy.port)
    expected, batch = [], b""
    for i in range(120):
        if i % 10 == 5:
            batch += get("/health")
            expected.append("health")
        else:
            body = json.dumps(completion(prompt=f"request {i}", stream=i % 2 == 0, max_tokens=4)).encode()
            batch += post("/v1/completions", body, f"X-Request-Id: rid-{i}")
            expected.append(f"rid-{i}")
    # all in one write (many requests per read), then the same again cut at odd places
    client.sock.sendall(batch)
    pieces = [batch[i:i + 7777] for i in range(0, len(batch), 7777)]
    for piece in pieces:
        client.sock.sendall(piece)
    answers = [client.response() for _ in range(2 * len(expected))]
    got = ["health" if h.get("x-request-id") is None and json.loads(b)["status"] == "ok" else h["x-request-id"]
           for _, h, b in answers]
    assert got == expected * 2
    assert all(status == 200 for status, _, _ in answers)
    # reading resumed after the pipeline drained: the connection is still alive for one more
    client.sock.sendall(post("/v1/completions", json.dumps(completion()).encode(), "X-Request-Id: last"))
    status, headers, _ = client.response()
    assert status == 200 and headers["x-request-id"] == "last"
    client.close()
    assert d.stats()["counts"]["decode"] == 2 * 108 + 1


def refused(proxy, raw: bytes, dribble: int = 0):
    """Status of the answer to `raw` (sent at once, or `dribble` bytes at a time until answered) and whether
    the proxy then closed the connection."""
    client = RawClient(proxy.port)
    try:
        if dribble:
            for i in range(0, len(raw), dribble):
                try:
                    client.sock.sendall(raw[i:i + dribble])
                except (BrokenPipeError, ConnectionResetError):
                    break
                time.sleep(0.002)
        else:
            client.sock.sendall(raw)
        status, _, body = client.response()
        message = json.loads(body)["error"]["message"] if status >= 400 else ""
        return status, message, status >= 400 and client.closed_by_peer()
    finally:
        client.close()


def test_oversized_heads_get_431_or_414_and_the_connection_closed(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d])
    body = json.dumps(completion()).encode()
    many = [f"X-H{i}: v" for i in range(101)]
    status, message, closed = refused(proxy, post("/v1/completions", body, *many))
    assert (status, closed) == (431, True) and "100" in message
    wide = [f"X-W{i}: " + "w" * 7000 for i in range(10)]  # each under the one-header cap, 70 KB in all
    assert refused(proxy, post("/v1/completions", body, *wide))[0::2] == (431, True)
    assert refused(proxy, post("/v1/completions", body, "X-Big: " + "b" * 20000))[0::2] == (431, True)
    assert refused(proxy, get("/v1/models?q=" + "u" * 9000))[0::2] == (414, True)
    # a header that never ends, trickled in: refused long before the client is done
    endless = post("/v1/completions", body).replace(b"\r\n\r\n", b"\r\nX-Endless: ") + b"e" * (1 * MIB)
    assert refused(proxy, endless, dribble=4096)[0::2] == (431, True)
    endless_trailer = (b"POST /v1/completions HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"%x\r\n%s\r\n0\r\nX-Trailer: " % (len(body), body)) + b"t" * MIB
    assert refused(proxy, endless_trailer, dribble=4096)[0::2] == (431, True)
    # just under every cap still works
    ok = [f"X-H{i}: v" for i in range(95)]
    assert refused(proxy, post("/v1/completions?" + "q" * 7000, body, *ok))[0] == 200
    assert proxy.metric("pdproxy_errors_total", cause="headers_too_large") == 5
    assert proxy.metric("pdproxy_errors_total", cause="url_too_long") == 1
    assert p.stats()["counts"]["prefill"] == 1


def test_bodies_over_the_cap_get_413_and_the_connection_closed(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--max-body-bytes", "100000")
    big = json.dumps(completion(prompt="x" * 300_000)).encode()
    status, message, closed = refused(proxy, post("/v1/completions", big))
    assert (status, closed) == (413, True) and "100000" in message
    chunks = b"".join(b"%x\r\n%s\r\n" % (50_000, big[i:i + 50_000]) for i in range(0, 150_000, 50_000))
    chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
               + b"0\r\n\r\n")
    assert refused(proxy, chunked)[0::2] == (413, True)
    assert proxy.metric("pdproxy_errors_total", cause="too_large") == 2
    assert p.stats()["counts"]["prefill"] == 0


def test_head_caps_are_configurable(cluster):
    p, d = cluster.backend("p1"), cluster.backend("d1")
    proxy = cluster.proxy([p], [d], "--max-header-count", "6", "--max-header-bytes", "1000",
                          "--max-header-line-bytes", "500", "--max-url-bytes", "100")
    body = json.dumps(completion()).encode()  # post() sends 3 headers (66 bytes) of its own

    def status(path="/v1/completions", *headers):
        return refused(proxy, post(path, body, *headers))[0]

    assert status("/v1/completions", "A: 1", "B: 2", "C: 3", "D: 4") == 431
    assert status("/v1/completions", "A: 1", "B: 2", "C: 3") == 200
    assert status("/v1/completions", "A: " + "a" * 600) == 431
    assert status("/v1/completions", "A: " + "a" * 400, "B: " + "b" * 400, "C: " + "c" * 400) == 431
    assert status("/v1/completions", "A: " + "a" * 400, "B: " + "b" * 400) == 200
    assert status("/v1/completions?" + "q" * 100) == 414
    assert status("/v1/completions?" + "q" * 50) == 200
