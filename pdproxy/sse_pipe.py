"""A Decode's SSE stream to the client: whole events only, bytes untouched, one client write per network read,
and the Decode's socket paused while the client's is full."""

from __future__ import annotations

import time

from .errors import gateway_failure, sse_error_event
from .http_client import BackendError


class SsePipe:
    """Decode SSE bytes -> client, whole events only. sink() runs for each body piece the parser yields;
    flush() runs once per network read (ClientConnection's after_feed), so the events one read brought leave
    in one write. A class rather than closures over a state dict: no per-stream dict and fewer cell lookups.

    With `recompute` (a Recompute, or None when continuation is off), an event whose stop_reason is
    "recomputed" ends the forwarding: `recomputed` holds it and `kept` the events before it."""

    __slots__ = ("ex", "client", "dconn", "recompute", "kept", "pending", "recomputed", "out")

    def __init__(self, ex, dconn, recompute):
        self.ex = ex
        self.client = ex.conn
        self.dconn = dconn
        self.recompute = recompute
        self.kept: list[bytes] = []
        self.pending = b""
        self.recomputed = None
        self.out: list[bytes] = []

    async def run(self, lease) -> SsePipe | None:
        """Forward until the Decode's stream ends (`lease` holds that Decode); returns this pipe (see
        `recomputed`). None: the stream broke, and the client's stream has been ended with an SSE error event."""
        ex = self.ex
        dconn = self.dconn
        done = dconn.attach_sink(self.sink, self.flush)
        self.flush()  # whatever came with the Decode's head
        dconn.arm(ex.deadline - time.perf_counter(), "end of stream (total timeout)")
        try:
            await done
        except BackendError as exc:
            d = lease.backend
            ex.flow.pools["decode"].report_failure(d, exc)
            ex.flow.metrics.error("stream_broken")
            status, err_type = gateway_failure(exc.kind)
            self.out.append(sse_error_event(status, f"decode {d.addr} stream broke: {exc.reason}", err_type))
            self.client.end_stream(b"".join(self.out))
            return None
        if self.recomputed is None:
            # the last events, a trailing partial event and the end of the stream: one write
            out = self.out
            if self.pending:
                out.append(self.pending)
            self.client.end_stream(b"".join(out))
            out.clear()
        else:
            self.flush()
        lease.done()
        return self

    def sink(self, data: bytes):
        if self.recomputed is not None:
            return
        if self.pending:
            data = self.pending + data
            self.pending = b""
        if data[-2:] != b"\n\n":  # not data.endswith(): no argument parsing, once per event
            cut = data.rfind(b"\n\n")
            if cut < 0:
                self.pending = data
                return
            self.pending = data[cut + 2:]
            data = data[:cut + 2]
        if self.recompute is not None:
            if b"recomputed" in data:
                data, event = self.recompute.split_at_recomputed(data)
                self.recomputed = event
                if not data:
                    return
            self.kept.append(data)
        ex = self.ex
        if not ex.ttft_seen:
            ex.mark_first_byte()
        self.out.append(data)

    def flush(self):
        out = self.out
        if not out:
            return
        client = self.client
        client.send_chunk(out[0] if len(out) == 1 else b"".join(out))
        out.clear()
        if client.write_paused and not self.dconn.closed:
            self.dconn.pause_reading()
            client.on_resume(self.resume)

    def resume(self):
        if not self.dconn.closed:
            self.dconn.resume_reading()
