"""How many requests of a running AISBench job have finished, read from its files, here or over SSH.

While a task infers, each worker process appends one line per finished request (success or failure) to
{predictions|performances}/<model>/tmp/tmp_<id>.jsonl, beside a live tmp_<id>.db. When the worker ends, the .db
goes (removed in accuracy mode, moved to db_data/ in perf mode) and the lines land in the final files:
predictions/<model>/<ds>.jsonl + <ds>_failed.jsonl (accuracy), performances/<model>/<ds>_details.jsonl (perf,
failures included). A tmp file is kept after a worker that had failures, so only tmp files with their .db are
counted. Lines are written in batches of about a tenth of the concurrency, so the count moves in such steps."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from apps.evals.aisbench.rundir import latest_run_dir

MARKER = "AISBENCH_PROGRESS"

# The same count as count_finished, for a remote host: `sh -c "$PROGRESS_SHELL" sh <work_dir>`. No user text in it.
PROGRESS_SHELL = r"""
run=
for d in "$1"/*; do
  case ${d##*/} in
    [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]_[0-9][0-9][0-9][0-9][0-9][0-9]) [ -d "$d" ] && run=$d ;;
  esac
done
n=0
if [ -n "$run" ]; then
  for f in "$run"/predictions/*/tmp/*.jsonl "$run"/performances/*/tmp/*.jsonl; do
    [ -f "$f" ] && [ -f "${f%.jsonl}.db" ] && n=$((n + $(wc -l < "$f")))
  done
  for f in "$run"/predictions/*/*.jsonl "$run"/performances/*/*_details.jsonl; do
    [ -f "$f" ] && n=$((n + $(wc -l < "$f")))
  done
fi
echo "AISBENCH_PROGRESS $n"
""".strip()

OUTPUT = re.compile(rf"^{MARKER} (\d+)$", re.MULTILINE)


def counted_files(run: Path) -> list[Path]:
    live_tmp = [f for pattern in ("predictions/*/tmp/*.jsonl", "performances/*/tmp/*.jsonl")
                for f in sorted(run.glob(pattern)) if f.with_suffix(".db").is_file()]
    final = sorted(run.glob("predictions/*/*.jsonl")) + sorted(run.glob("performances/*/*_details.jsonl"))
    return [f for f in live_tmp + final if f.is_file()]


def newline_count(path: Path) -> int:
    count = 0
    try:
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                count += block.count(b"\n")
    except FileNotFoundError:  # removed between the listing and the read (a worker just finished)
        return 0
    return count


def count_finished(work_dir: str | Path) -> int:
    """Finished requests (successful or failed, warmup excluded) of the newest run under work_dir (the -w folder)."""
    run = latest_run_dir(work_dir)
    return sum(newline_count(f) for f in counted_files(run)) if run else 0


def progress_command(work_dir: str) -> str:
    """A shell command line that prints the count for work_dir on a remote host (the path is quoted)."""
    return shlex.join(["sh", "-c", PROGRESS_SHELL, "aisbench-progress", work_dir])


def parse_progress_output(stdout: str) -> int:
    found = OUTPUT.findall(stdout)
    if not found:
        raise ValueError(f"no '{MARKER} <n>' line in the progress output: {stdout[-200:]!r}")
    return int(found[-1])
