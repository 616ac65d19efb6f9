"""Websocket for one job: events, status and node progress pushed to the group `job-<id>`."""

from apps.realtime.object_socket import ObjectGroupConsumer

from .models import Job


class JobConsumer(ObjectGroupConsumer):
    model = Job
    url_kwarg = "job_id"
    group_prefix = "job"
