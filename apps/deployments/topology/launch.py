"""Stand-in for `apps.jobs.ssh`'s LaunchSpec and detached_start_command until that module lands.

Same field names as style.md's sketch (argv, env, workdir, log_file, pid_file) so swapping the import is the
only change. The shell line follows the design's traps: `;` (never `&&`) before the backgrounded command, so
only that command is detached, and every word goes through shlex.quote.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass(frozen=True)
class LaunchSpec:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    workdir: PurePosixPath
    log_file: PurePosixPath
    pid_file: PurePosixPath


def detached_start_command(spec: LaunchSpec) -> str:
    q = shlex.quote
    dirs = sorted({str(spec.workdir), str(spec.log_file.parent), str(spec.pid_file.parent)})
    env = " ".join(q(f"{k}={v}") for k, v in sorted(spec.env.items()))
    cmd = " ".join(q(a) for a in spec.argv)
    return (f"mkdir -p {' '.join(q(d) for d in dirs)}; cd {q(str(spec.workdir))} || exit 1; "
            f"env {env + ' ' if env else ''}setsid nohup {cmd} >{q(str(spec.log_file))} 2>&1 </dev/null & "
            f"echo $! >{q(str(spec.pid_file))}")
