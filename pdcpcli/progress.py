"""--wait: follow a job to its end, a progress bar per node.

Every ~0.5 s pdcp reads the job (`GET /api/jobs/<id>/`: status and `node_summaries`, each node's state, steps
done of total and message) and its new events (`GET /api/jobs/<id>/events/?counter__gt=<last>`). On a terminal
the bars are redrawn in place; otherwise one line is printed per change (a node's state, steps or message, the
job's status), so a log or CI shows the same story. Error events are printed as they come, either way."""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass

from .api import CliError, ConnectionFailed
from .output import duration

FINISHED = frozenset({"successful", "failed", "error", "canceled"})
JOB_EXIT = {"successful": 0, "failed": 1, "error": 1, "canceled": 2}
BAR = 20
POLL_SECONDS = 0.5
GIVE_UP_AFTER = 20  # polls in a row that cannot reach the server (~10 s)


class Interrupted(CliError):
    exit_code = 130


@dataclass(frozen=True)
class Row:
    name: str
    state: str
    done: int
    total: int
    message: str = ""

    @property
    def percent(self) -> int:
        if self.state == "done" and not self.total:
            return 100
        return int(100 * self.done / self.total) if self.total else 0


def bar(row: Row) -> str:
    filled = BAR if row.state == "done" and not row.total else (BAR * row.done // row.total if row.total else 0)
    return "#" * filled + "-" * (BAR - filled)


def node_rows(job: dict, last_text: dict[str, str]) -> list[Row]:
    rows = []
    for s in job.get("node_summaries") or []:
        node = s.get("node") or "?"
        rows.append(Row(node, s.get("state") or "waiting", int(s.get("steps_done") or 0),
                        int(s.get("steps_total") or 0), s.get("message") or last_text.get(node, "")))
    return rows


def job_title(job: dict) -> str:
    return f"job {job.get('id')} {job.get('kind', '')} {job.get('target_label', '')}".rstrip()


class Display:
    """Draws the rows; `tty` redraws them in place, else prints what changed."""

    def __init__(self, out, tty: bool):
        self.out, self.tty = out, tty
        self.drawn = 0  # lines of the live block on screen (tty)
        self.seen: dict[str, tuple] = {}
        self.status = None

    def _width(self) -> int:
        return max(40, shutil.get_terminal_size((100, 24)).columns - 1)

    def _fit(self, line: str) -> str:
        width = self._width()
        return line if len(line) <= width else line[:width - 1] + "…"

    def row_line(self, row: Row, name_width: int) -> str:
        steps = f"{row.done}/{row.total}" if row.total else "-"
        return (f"  {row.name:<{name_width}}  [{bar(row)}] {row.percent:>3}%  {steps:>5}  {row.state:<8}"
                f"  {row.message}").rstrip()

    def update(self, job: dict, rows: list[Row], notes: list[str], last_event: str = "") -> None:
        """notes are printed once above the live block (tty) or as they come (lines)."""
        status = job.get("status", "?")
        elapsed = duration(job.get("duration_seconds"))
        name_width = max([len(r.name) for r in rows] + [4])
        waiting = f" ({job['waiting']['message']})" if isinstance(job.get("waiting"), dict) and \
            job["waiting"].get("message") else ""
        if self.tty:
            header = f"{job_title(job)}: {status}" + (f"  {elapsed}" if elapsed else "") + waiting
            block = [header] + [self.row_line(r, name_width) for r in rows]
            if not rows and last_event:
                block.append(f"  {last_event}")
            text = ""
            if self.drawn:
                text += f"\x1b[{self.drawn}F"  # to the start of the block's first line
            text += "\x1b[J"  # clear from there to the end of the screen
            text += "".join(self._fit(n) + "\n" for n in notes)
            text += "".join(self._fit(line) + "\n" for line in block)
            self.out.write(text)
            self.drawn = len(block)
        else:
            lines = [f"{job_title(job)}: {status}{waiting}"] if status != self.status else []
            lines += notes
            for r in rows:
                key = (r.state, r.done, r.total, r.message)
                if self.seen.get(r.name) != key:
                    self.seen[r.name] = key
                    lines.append(self.row_line(r, name_width))
            self.out.write("".join(line + "\n" for line in lines))
        self.status = status
        self.out.flush()


def fetch_events(client, job_id: int, after: int) -> list[dict]:
    events, offset = [], 0
    while True:
        body = client.get(f"/api/jobs/{job_id}/events/", counter__gt=after, limit=500, offset=offset or None)
        page = body.get("results", []) if isinstance(body, dict) else list(body or [])
        events += page
        if not isinstance(body, dict) or not body.get("next") or not page:
            return events
        offset += len(page)


def watch(client, job_id: int, *, out=None, tty: bool | None = None, extra=None) -> dict:
    """Follows the job until it finishes and returns it as last read. `extra(job)` may add rows (an eval run's
    progress)."""
    out = out or sys.stdout

    def sleep():
        time.sleep(POLL_SECONDS)

    display = Display(out, out.isatty() if tty is None else tty)
    last_counter, last_text, last_event, failures = 0, {}, "", 0
    try:
        while True:
            try:
                job = client.get(f"/api/jobs/{job_id}/")
                events = fetch_events(client, job_id, last_counter)
                failures = 0
            except ConnectionFailed:
                failures += 1
                if failures >= GIVE_UP_AFTER:
                    raise
                sleep()
                continue
            notes = []
            for event in events:
                last_counter = max(last_counter, int(event.get("counter") or 0))
                text = " ".join(str(event.get("text") or "").split())
                node = event.get("node") or ""
                if event.get("stream") in ("step", "info", "error") and text:
                    last_event = f"{node}: {text}" if node else text
                    if node:
                        last_text[node] = text
                if event.get("stream") == "error" and text:
                    notes.append(f"  ! {node + ': ' if node else ''}{text}")
            rows = node_rows(job, last_text) + (list(extra(job)) if extra else [])
            display.update(job, rows, notes, last_event)
            if job.get("status") in FINISHED:
                return job
            sleep()
    except KeyboardInterrupt:
        raise Interrupted(f"stopped watching; job {job_id} goes on (`pdcp job {job_id} --wait` to watch it "
                          f"again, `pdcp cancel {job_id}` to stop it)") from None


def final_line(job: dict) -> str:
    took = duration(job.get("duration_seconds"))
    text = f"{job_title(job)} {job.get('status')}" + (f" in {took}" if took else "")
    explanation = " ".join(str(job.get("explanation") or "").split())
    return text + (f": {explanation}" if explanation else "")


def job_exit_code(job: dict) -> int:
    return JOB_EXIT.get(job.get("status"), 1)
