"""Signals other apps listen to (jobs sits below them, so it tells them instead of calling them)."""

from django.dispatch import Signal

# Sent after commit when a job reaches a finished state through job_transition (the runner, or the sweep of jobs
# whose worker died); keyword argument `job`. Apps whose records follow a job's end (an eval run) listen.
job_ended = Signal()

# Sent after commit when the sweep marks a running job failed because its worker is gone; keyword argument `job`.
# What the job was doing on the nodes is unknown then: apps whose records follow the nodes read them back.
job_orphaned = Signal()
