"""Inventory writes: credentials, host-key pinning, and applying an inventory file in one transaction."""

from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.jobs.choices import JobKind
from apps.jobs.services import job_create

from .allowlist import normal_allowlist
from .choices import CredentialKind
from .inventory_file import (
    FileError,
    InventoryFileInvalid,
    InventoryRows,
    looks_like_csv,
    parse_nodes_csv,
    parse_yaml,
)
from .models import Cluster, Node, SshCredential


class HostKeyNotConfirmed(Exception):
    pass


def public_key_of(private_key: str) -> str:
    """The OpenSSH public key line of a private key; ValueError with a readable reason if it is not one."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_ssh_private_key(private_key.encode(), password=None)
    except ValueError:
        try:
            key = serialization.load_pem_private_key(private_key.encode(), password=None)
        except (ValueError, TypeError) as exc:
            raise ValueError("not an unencrypted OpenSSH or PEM private key") from exc
    except TypeError as exc:
        raise ValueError("encrypted private keys are not supported: store it without a passphrase") from exc
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


KIND_CHANGE_NEEDS_SECRET = "a new secret is required when the kind changes"


def credential_kind_changed(credential: SshCredential) -> bool:
    """True when the kind differs from the stored one: the stored secret is of the old kind (a private key must
    never be sent to nodes as a password, nor a password read as a key)."""
    if credential.pk is None:
        return False
    stored = SshCredential.objects.filter(pk=credential.pk).values_list("kind", flat=True).first()
    return stored is not None and stored != credential.kind


def credential_save(credential: SshCredential, *, secret: str | None) -> SshCredential:
    if not secret and credential_kind_changed(credential):
        raise ValidationError({"secret": KIND_CHANGE_NEEDS_SECRET})
    if secret:
        credential.secret = secret
    if credential.kind == CredentialKind.PRIVATE_KEY and secret:
        try:
            credential.public_key = public_key_of(secret)
        except ValueError as exc:
            raise ValidationError({"secret": str(exc)}) from exc
    elif credential.kind == CredentialKind.PASSWORD:
        credential.public_key = ""
    if not credential.secret:
        raise ValidationError({"secret": "a private key or password is required"})
    credential.full_clean()
    credential.save()
    return credential


def node_fetch_host_key(node: Node) -> dict:
    """Reads the key the node presents now, for the operator to compare with what they expect. Pins nothing."""
    from sshexec import fetch_host_key, host_key_fingerprint

    key = fetch_host_key(node.address, node.ssh_port, timeout=5)
    return {"host_key": key, "fingerprint": host_key_fingerprint(key),
            "pinned": bool(node.host_key), "matches_pinned": node.host_key.strip() == key}


def node_pin_host_key(node: Node, *, host_key: str, fingerprint: str) -> Node:
    """Pins a key the operator saw; the fingerprint they confirmed must be the key's own."""
    from sshexec import SshTargetInvalid, host_key_fingerprint

    host_key = host_key.strip()
    if not host_key:
        raise ValidationError({"host_key": "paste the key as fetched: '<type> <base64>'"})
    node.host_key = host_key
    node.full_clean(exclude=["cluster", "credential"])
    try:
        presented = host_key_fingerprint(host_key)
    except SshTargetInvalid as exc:  # the right shape, but not a key (truncated, or another type's data)
        raise ValidationError({"host_key": str(exc)}) from None
    if presented != fingerprint.strip():
        raise HostKeyNotConfirmed("the confirmed fingerprint does not belong to this key: fetch the key again")
    node.save(update_fields=["host_key", "updated"])
    return node


def node_discover(node: Node, *, user):
    return job_create(kind=JobKind.DISCOVER, target=node, user=user, label=f"{node.cluster.name}/{node.name}")


def inventory_import(text: str, *, allow_key_files: bool = False, base_dir: Path | None = None) -> dict:
    """Validates the whole file, then applies it in one transaction; a bad file changes nothing."""
    rows = parse_nodes_csv(text) if looks_like_csv(text) else parse_yaml(text)
    with transaction.atomic():
        counts = _apply(rows, allow_key_files=allow_key_files, base_dir=base_dir)
    return counts


def _apply(rows: InventoryRows, *, allow_key_files: bool, base_dir: Path | None) -> dict:
    errors: list[FileError] = []
    counts = {"credentials": 0, "clusters": 0, "nodes_created": 0, "nodes_updated": 0}
    credentials = {c.name: c for c in SshCredential.objects.all()}
    for row in rows.credentials:
        secret = row.private_key or row.password
        if row.private_key_file:
            if not allow_key_files:
                errors.append(FileError(row.line, f"credential {row.name}.private_key_file",
                                        "key files are read only by `manage.py import_inventory`; paste the key "
                                        "as private_key instead"))
                continue
            path = Path(row.private_key_file)
            path = path if path.is_absolute() or base_dir is None else base_dir / path
            try:
                secret = path.read_text()
            except OSError as exc:
                errors.append(FileError(row.line, f"credential {row.name}.private_key_file", f"cannot read: {exc.strerror}"))
                continue
        cred = credentials.get(row.name) or SshCredential(name=row.name)
        cred.username = row.username
        if secret or not cred.pk:  # no secret in the file keeps the stored one, and so its kind
            cred.kind = CredentialKind.PASSWORD if row.password else CredentialKind.PRIVATE_KEY
        if not secret and not cred.pk:
            errors.append(FileError(row.line, f"credential {row.name}", "a new credential needs private_key, "
                                    "private_key_file or password"))
            continue
        try:
            credential_save(cred, secret=secret)
        except ValidationError as exc:
            errors += _model_errors(exc, row.line, f"credential {row.name}")
            continue
        credentials[row.name] = cred
        counts["credentials"] += 1
    clusters = {c.name: c for c in Cluster.objects.all()}
    for row in rows.clusters:
        cluster = clusters.get(row.name) or Cluster(name=row.name)
        if row.description:
            cluster.description = row.description
        if row.allowlist is not None:
            cluster.allowlist = row.allowlist
        try:
            cluster.full_clean()
            cluster.save()
        except ValidationError as exc:
            errors += _model_errors(exc, row.line, f"cluster {row.name}")
            continue
        clusters[row.name] = cluster
        counts["clusters"] += 1
    existing = {(n.cluster_id, n.name): n for n in Node.objects.all()}
    for row in rows.nodes:
        cluster = clusters.get(row.cluster)
        if cluster is None:
            errors.append(FileError(row.line, "cluster", f"unknown cluster {row.cluster!r}"))
            continue
        values = dict(row.values)
        cred_name = values.pop("credential", None)
        node = existing.get((cluster.pk, values["name"])) or Node(cluster=cluster)
        created = node.pk is None
        if cred_name:
            if cred_name not in credentials:
                errors.append(FileError(row.line, f"node {values['name']}.credential",
                                        f"unknown credential {cred_name!r}: define it under credentials"))
                continue
            node.credential = credentials[cred_name]
        for key, value in values.items():
            setattr(node, key, value.strip() if key == "host_key" and isinstance(value, str) else value)
        try:
            node.full_clean()
            node.save()
        except ValidationError as exc:
            errors += _model_errors(exc, row.line, f"node {values.get('name')}")
            continue
        except Exception as exc:  # a constraint the database enforces (address:port used twice)
            errors.append(FileError(row.line, f"node {values.get('name')}", f"conflicts with another node: {exc}"))
            raise InventoryFileInvalid(errors) from exc
        counts["nodes_created" if created else "nodes_updated"] += 1
    if errors:
        raise InventoryFileInvalid(errors)
    return counts


def _model_errors(exc: ValidationError, line: int, where: str) -> list[FileError]:
    if hasattr(exc, "error_dict"):
        return [FileError(line, f"{where}.{field}", "; ".join(msgs)) for field, msgs in exc.message_dict.items()]
    return [FileError(line, where, "; ".join(exc.messages))]


def inventory_export_nodes_csv(clusters=None) -> str:
    """Nodes as CSV in the import's column order (labels as k=v;k=v); credentials by name only."""
    import csv
    import io

    from .inventory_file import CSV_COLUMNS

    clusters = clusters if clusters is not None else Cluster.objects.all()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    nodes = Node.objects.filter(cluster__in=clusters).select_related("cluster", "credential")
    for node in nodes.order_by("cluster__name", "name"):
        writer.writerow([node.cluster.name, node.name, node.address, node.ssh_port, node.ssh_user,
                         node.credential.name if node.credential else "", node.host_key, node.hardware_model,
                         node.npu_model, node.npu_count, ";".join(f"{k}={v}" for k, v in node.labels.items())])
    return out.getvalue()


def inventory_export(clusters=None) -> dict:
    """The inventory as the import format; secrets are never exported (credentials keep name and user only)."""
    clusters = clusters if clusters is not None else Cluster.objects.all()
    clusters = clusters.prefetch_related("nodes__credential")
    used = {}
    out_clusters = []
    for cluster in clusters:
        nodes = []
        for node in cluster.nodes.all():
            item = {"name": node.name, "address": node.address, "ssh_port": node.ssh_port}
            if node.ssh_user:
                item["ssh_user"] = node.ssh_user
            if node.credential:
                item["credential"] = node.credential.name
                used[node.credential.name] = node.credential
            for key in ("host_key", "hardware_model", "npu_model"):
                if getattr(node, key):
                    item[key] = getattr(node, key)
            item["npu_count"] = node.npu_count
            if node.labels:
                item["labels"] = node.labels
            nodes.append(item)
        entry = {"name": cluster.name, "description": cluster.description}
        if cluster.allowlist:
            entry["allowlist"] = normal_allowlist(cluster.allowlist)
        out_clusters.append({**entry, "nodes": nodes})
    credentials = [{"name": c.name, "username": c.username} for c in sorted(used.values(), key=lambda c: c.name)]
    return {"version": 1, "credentials": credentials, "clusters": out_clusters}
