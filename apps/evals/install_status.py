"""Whether ais_bench can run on this control plane: one check for the pages' banner and the worker's runs.

The check starts the AISBench venv's Python (~1 s), so its answer is cached: a pass for 10 minutes, a failure for
30 s (a repaired install shows up soon); a new or rebuilt executable (another mtime) is checked afresh.
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.cache import cache

TTL_S = {True: 600, False: 30}  # by "installed fine"


def local_install_problem() -> str:
    """Why ais_bench cannot run here ("" when it can); never raises."""
    path = settings.PDCP_AISBENCH
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        mtime = None
    key = f"evals:aisbench-install:{path}:{mtime}"
    problem = cache.get(key)
    if problem is None:
        problem = _check(path)
        cache.set(key, problem, TTL_S[not problem])
    return problem


def _check(path: str) -> str:
    try:
        from .aisbench.install import check_install

        status = check_install(path)
    except Exception as exc:  # noqa: BLE001 - the banner says what went wrong, never a traceback
        return f"the AISBench install could not be checked ({type(exc).__name__}: {exc}); run `make aisbench`"
    return "" if status.ok else status.problem
