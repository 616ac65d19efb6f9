"""The per-request figures the playground shows, measured in the control plane: from sending to the first piece of
answer text (TTFT), and between pieces (ITL)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field


@dataclass
class RequestClock:
    started: float = field(default_factory=time.perf_counter)
    first: float | None = None
    last: float | None = None
    gaps: list[float] = field(default_factory=list)  # seconds between consecutive pieces of text
    pieces: int = 0

    def piece(self, now: float | None = None) -> None:
        """A chunk with answer text arrived."""
        now = time.perf_counter() if now is None else now
        if self.first is None:
            self.first = now
        else:
            self.gaps.append(now - self.last)
        self.last = now
        self.pieces += 1

    def figures(self, now: float | None = None) -> dict:
        now = time.perf_counter() if now is None else now
        ms = 1000.0
        return {
            "ttft_ms": round((self.first - self.started) * ms, 2) if self.first is not None else None,
            "itl_p50_ms": round(statistics.median(self.gaps) * ms, 2) if self.gaps else None,
            "itl_mean_ms": round(statistics.fmean(self.gaps) * ms, 2) if self.gaps else None,
            "total_ms": round((now - self.started) * ms, 2),
            "chunks": self.pieces,
        }
