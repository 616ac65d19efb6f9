"""Deployments: a PD topology for a cluster, kept as numbered revisions (exactly one active), and the processes
the jobs started for it on the nodes."""

import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.audit.registry import audited
from apps.inventory.models import Cluster, Node, name_validator
from apps.inventory.secrets import EncryptedTextField, is_undecryptable

from .choices import ProcessRole, ProcessState


def new_admin_token() -> str:
    return secrets.token_urlsafe(32)


@audited(secret_fields=("proxy_admin_token",))
class Deployment(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[name_validator])
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="deployments")
    description = models.TextField(blank=True)
    proxy_admin_token = EncryptedTextField(
        default=new_admin_token, editable=False,
        help_text="Bearer token of the proxy's admin API (drain/undrain); written to a 0600 file on the proxy node.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def active_revision(self):
        return self.revisions.filter(is_active=True).first()

    @property
    def secret_problem(self) -> str:
        """Why the proxy admin token cannot be used (empty when it can); a deploy that starts the proxy replaces it."""
        if not is_undecryptable(self.proxy_admin_token):
            return ""
        return ("proxy admin token: secret cannot be decrypted with the current PDCP_SECRETS_KEY: add the old key, "
                "or deploy again (starting the proxy gives it a new token)")


@audited()
class Revision(models.Model):
    """One version of the spec, stored as validated plain data (spec_to_dict) plus the YAML the operator wrote."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField(help_text="The validated topology as plain data (spec_to_dict).")
    yaml_text = models.TextField(help_text="The spec as the operator wrote it (comments kept).")
    is_active = models.BooleanField(default=False)
    comment = models.CharField(max_length=200, blank=True)
    # Copied from the spec when saved, so lists show them without parsing every spec.
    launch_profile = models.CharField(max_length=20)
    served_model = models.CharField(max_length=200)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["deployment", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "number"], name="revision_number_unique"),
            models.UniqueConstraint(fields=["deployment"], condition=Q(is_active=True),
                                    name="one_active_revision_per_deployment"),
        ]

    def __str__(self):
        return f"{self.deployment.name} r{self.number}"


class Process(models.Model):
    """A process a job started (or found) on a node: where it runs, how it was started, and its last known state.
    Rows are never the truth about a node: every job re-reads the pid file before acting."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="processes")
    revision = models.ForeignKey(Revision, null=True, on_delete=models.SET_NULL, related_name="processes")
    node = models.ForeignKey(Node, null=True, on_delete=models.SET_NULL, related_name="deployment_processes")
    node_name = models.CharField(max_length=63)
    role = models.CharField(max_length=10)  # store | kv_pool | prefill | decode | proxy
    instance = models.CharField(max_length=63, blank=True)
    key = models.CharField(max_length=80, help_text="Unique in the deployment: p0-dp1, store-0, kv-pool, proxy")
    address = models.CharField(max_length=253)
    ports = models.JSONField(default=list)
    health_url = models.CharField(max_length=300, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    command = models.TextField(help_text="The exact shell line that started it (display text).")
    fingerprint = models.CharField(max_length=64, help_text="sha256 of the start command: same = nothing to change")
    log_path = models.CharField(max_length=500)
    pid_file = models.CharField(max_length=500)
    state = models.CharField(max_length=10, choices=ProcessState.choices, default=ProcessState.UNKNOWN)
    state_detail = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    last_job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["deployment", "key"]
        constraints = [models.UniqueConstraint(fields=["deployment", "key"], name="process_key_unique")]
        indexes = [models.Index(fields=["deployment", "state"])]

    def __str__(self):
        return f"{self.deployment.name}/{self.key}@{self.node_name}"

    @property
    def colour(self) -> str:
        return ProcessState.colour_of(self.state)

    @property
    def role_colour(self) -> str:
        return ProcessRole.colour_of(self.role)
