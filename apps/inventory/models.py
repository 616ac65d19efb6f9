"""Inventory: clusters, nodes reached over SSH, their NPU dies, and the SSH credentials (encrypted at rest)."""

import re

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from apps.audit.registry import audited

from .allowlist import allowlist_problems
from .choices import CredentialKind, NpuHealth, Reachability
from .secrets import UNDECRYPTABLE, EncryptedTextField, is_undecryptable

name_validator = RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
                                "use letters, digits, '.', '_' or '-' (at most 63, starting with a letter or digit)")
HOST_KEY_RE = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|rsa-sha2-(256|512)) [A-Za-z0-9+/]+={0,3}$")


def validate_host_key(value: str) -> None:
    if value and not HOST_KEY_RE.match(value.strip()):
        raise ValidationError("expected '<key type> <base64>', e.g. 'ssh-ed25519 AAAAC3Nza...'")


def validate_address(value: str) -> None:
    if not re.match(r"^[A-Za-z0-9.:-]{1,253}$", value):
        raise ValidationError("expected an IP address or a host name")


def validate_allowlist(value) -> None:
    problems = allowlist_problems(value)
    if problems:
        raise ValidationError([f"{path}: {message}" for path, message in problems])


@audited()
class Cluster(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[name_validator])
    description = models.TextField(blank=True)
    allowlist = models.JSONField(
        default=dict, blank=True, validators=[validate_allowlist],
        help_text="Admin only: the container images (pinned), host directories (weights, mindie_scripts) and bind "
                  "mounts (mounts) a topology of this cluster may name (docs/cluster-allowlist.md).")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


@audited(secret_fields=("secret",))
class SshCredential(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[name_validator])
    username = models.CharField(max_length=64, validators=[RegexValidator(r"^[a-z_][a-z0-9_.-]{0,63}$",
                                                                          "not a valid Unix user name")])
    kind = models.CharField(max_length=16, choices=CredentialKind.choices, default=CredentialKind.PRIVATE_KEY)
    secret = EncryptedTextField(help_text="Private key text or password; encrypted at rest, never returned by the API.")
    public_key = models.TextField(blank=True, help_text="Derived from the private key, safe to show.")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} ({self.username}, {self.get_kind_display().lower()})"

    def __repr__(self):
        return f"<SshCredential {self.name}>"

    @property
    def secret_problem(self) -> str:
        """Why the stored secret cannot be used (empty when it can): shown in the UI and the API."""
        return UNDECRYPTABLE if is_undecryptable(self.secret) else ""


@audited()
class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=63, validators=[name_validator])
    address = models.CharField(max_length=253, validators=[validate_address])
    ssh_port = models.PositiveIntegerField(default=22, validators=[MinValueValidator(1), MaxValueValidator(65535)])
    ssh_user = models.CharField(max_length=64, blank=True, help_text="Defaults to the credential's user.")
    credential = models.ForeignKey(SshCredential, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="nodes")
    host_key = models.TextField(blank=True, validators=[validate_host_key],
                                help_text="Pinned public host key '<type> <base64>'; connections to any other key fail.")
    hardware_model = models.CharField(max_length=100, blank=True)
    npu_model = models.CharField(max_length=100, blank=True)
    npu_count = models.PositiveIntegerField(default=0, help_text="NPU dies (logical ids) expected on this node.")
    labels = models.JSONField(default=dict, blank=True)
    reachability = models.CharField(max_length=20, choices=Reachability.choices, default=Reachability.UNKNOWN)
    reachability_detail = models.TextField(blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_name_unique_in_cluster"),
            models.UniqueConstraint(fields=["address", "ssh_port"], name="node_address_port_unique"),
        ]

    def __str__(self):
        return self.name

    @property
    def reachability_colour(self) -> str:
        return Reachability.colour_of(self.reachability)

    @property
    def login_user(self) -> str:
        return self.ssh_user or (self.credential.username if self.credential else "")

    def clean(self):
        if not isinstance(self.labels, dict) or not all(
            isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in (self.labels or {}).items()
        ):
            raise ValidationError({"labels": "labels must be a mapping of names to plain values"})


class Npu(models.Model):
    """One NPU die as npu-smi reports it (an A3 NPU id has two dies; the logical id is what ASCEND_RT_VISIBLE_DEVICES counts)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="npus")
    npu_id = models.PositiveIntegerField()
    chip_id = models.PositiveIntegerField()
    logical_id = models.PositiveIntegerField()
    phy_id = models.PositiveIntegerField(null=True, blank=True)
    name = models.CharField(max_length=64)
    bus_id = models.CharField(max_length=32, blank=True)
    health = models.CharField(max_length=10, choices=NpuHealth.choices, default=NpuHealth.UNKNOWN)
    hbm_used_mb = models.PositiveIntegerField(default=0)
    hbm_total_mb = models.PositiveIntegerField(default=0)
    aicore_percent = models.FloatField(default=0)
    power_w = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node", "logical_id"]
        constraints = [models.UniqueConstraint(fields=["node", "logical_id"], name="npu_logical_id_unique_on_node")]

    def __str__(self):
        return f"{self.node.name}:npu{self.npu_id}/chip{self.chip_id}"

    @property
    def health_colour(self) -> str:
        return NpuHealth.colour_of(self.health)

    @property
    def hbm_percent(self) -> float:
        return round(100.0 * self.hbm_used_mb / self.hbm_total_mb, 1) if self.hbm_total_mb else 0.0
