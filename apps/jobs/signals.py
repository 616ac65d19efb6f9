"""Signals other apps listen to (jobs sits below them, so it tells them instead of calling them)."""

from django.dispatch import Signal

# Sent after commit when a job reaches a finished state through job_transition (the runner, or the sweep of jobs
# whose worker died); keyword argument `job`. Apps whose records follow a job's end (an eval run) listen.
job_ended = Signal()
