"""Reads an inventory file (YAML, or CSV of nodes) into checked rows, each error naming its line and field."""

import csv
import io
import re
from dataclasses import dataclass, field

import yaml

from plainyaml import NoAliasSafeLoader, refuse_duplicate_keys
from plainyaml import short_repr as _show

from .allowlist import allowlist_problems, normal_allowlist

ALLOWED_TOP = {"version", "credentials", "clusters"}
CREDENTIAL_KEYS = {"name", "username", "private_key", "private_key_file", "password"}
CLUSTER_KEYS = {"name", "description", "allowlist", "nodes"}
NODE_KEYS = {"name", "address", "ssh_port", "ssh_user", "credential", "host_key", "hardware_model", "npu_model",
             "npu_count", "labels"}
CSV_COLUMNS = ["cluster", "name", "address", "ssh_port", "ssh_user", "credential", "host_key", "hardware_model",
               "npu_model", "npu_count", "labels"]


@dataclass(frozen=True)
class FileError:
    line: int
    field: str
    message: str

    def __str__(self):
        return f"line {self.line}: {self.field}: {self.message}"


class InventoryFileInvalid(Exception):
    def __init__(self, errors: list[FileError]):
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors[:20]))


@dataclass
class CredentialRow:
    line: int
    name: str
    username: str
    private_key: str | None = None
    private_key_file: str | None = None
    password: str | None = None


@dataclass
class NodeRow:
    line: int
    cluster: str
    values: dict


@dataclass
class ClusterRow:
    line: int
    name: str
    description: str = ""
    allowlist: dict | None = None  # None: the file does not say (the stored one is kept)


@dataclass
class InventoryRows:
    credentials: list[CredentialRow] = field(default_factory=list)
    clusters: list[ClusterRow] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)


class _LineLoader(NoAliasSafeLoader):
    """SafeLoader (no aliases) whose mappings remember the line of each key (1-based)."""


class LinedDict(dict):
    lines: dict
    start_line: int


def _construct_mapping(loader, node):
    loader.flatten_mapping(node)
    refuse_duplicate_keys(node)
    mapping = LinedDict()
    mapping.lines = {}
    mapping.start_line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.constructor.ConstructorError(None, None, "a mapping key must be plain text",
                                                    key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = key_node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _allowlist(cluster: LinedDict, where: str, errors: list[FileError]) -> dict | None:
    if "allowlist" not in cluster:
        return None
    line = cluster.lines.get("allowlist", cluster.start_line)
    problems = allowlist_problems(cluster["allowlist"])
    errors += [FileError(line, f"{where}.{path}", message) for path, message in problems]
    return None if problems else normal_allowlist(cluster["allowlist"])


def parse_yaml(text: str) -> InventoryRows:
    try:
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise InventoryFileInvalid([FileError(mark.line + 1 if mark else 0, "(syntax)", str(exc.problem))]) from exc
    except yaml.YAMLError as exc:
        raise InventoryFileInvalid([FileError(0, "(syntax)", str(exc))]) from exc
    errors: list[FileError] = []
    rows = InventoryRows()
    if not isinstance(data, dict):
        raise InventoryFileInvalid([FileError(1, "(document)", "expected a mapping with 'clusters' (and 'credentials')")])
    _unknown(data, ALLOWED_TOP, "", errors)
    if data.get("version", 1) != 1:
        errors.append(FileError(data.lines.get("version", 1), "version", "only version 1 is understood"))
    for i, cred in enumerate(_list(data, "credentials", errors)):
        where = f"credentials[{i}]"
        if not _is_map(cred, where, _line(data, "credentials"), errors):
            continue
        _unknown(cred, CREDENTIAL_KEYS, where, errors)
        name = _str(cred, "name", where, errors, required=True)
        username = _str(cred, "username", where, errors, required=True)
        secrets = [k for k in ("private_key", "private_key_file", "password") if cred.get(k)]
        if len(secrets) > 1:
            errors.append(FileError(cred.start_line, where, "give only one of private_key, private_key_file, password"))
        row = CredentialRow(cred.start_line, name, username)
        for key in ("private_key", "private_key_file", "password"):
            setattr(row, key, _str(cred, key, where, errors))
        rows.credentials.append(row)
    for i, cluster in enumerate(_list(data, "clusters", errors)):
        where = f"clusters[{i}]"
        if not _is_map(cluster, where, _line(data, "clusters"), errors):
            continue
        _unknown(cluster, CLUSTER_KEYS, where, errors)
        cname = _str(cluster, "name", where, errors, required=True)
        rows.clusters.append(ClusterRow(cluster.start_line, cname, _str(cluster, "description", where, errors) or "",
                                        _allowlist(cluster, where, errors)))
        for j, node in enumerate(_list(cluster, "nodes", errors, where)):
            nwhere = f"{where}.nodes[{j}]"
            if not _is_map(node, nwhere, _line(cluster, "nodes"), errors):
                continue
            _unknown(node, NODE_KEYS, nwhere, errors)
            values = {k: node[k] for k in NODE_KEYS if k in node}
            for key in ("name", "address"):
                _str(node, key, nwhere, errors, required=True)
            for key in ("ssh_user", "credential", "host_key", "hardware_model", "npu_model"):
                _str(node, key, nwhere, errors)
            for key in ("ssh_port", "npu_count"):
                if key in node and (not isinstance(node[key], int) or isinstance(node[key], bool) or node[key] < 0):
                    errors.append(FileError(node.lines[key], f"{nwhere}.{key}", f"expected a whole number, got {_show(node[key])}"))
            if "labels" in node and not isinstance(node["labels"], dict):
                errors.append(FileError(node.lines["labels"], f"{nwhere}.labels", "expected a mapping like {role: prefill}"))
            values = {k: (dict(v) if isinstance(v, dict) else v) for k, v in values.items()}
            rows.nodes.append(NodeRow(node.start_line, cname or "", values))
    if errors:
        raise InventoryFileInvalid(errors)
    return rows


def parse_nodes_csv(text: str) -> InventoryRows:
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in ("cluster", "name", "address") if c not in header]
    unknown = [c for c in header if c not in CSV_COLUMNS]
    errors = [FileError(1, "(header)", f"missing column {c!r}") for c in missing]
    errors += [FileError(1, "(header)", f"unknown column {c!r}; known: {', '.join(CSV_COLUMNS)}") for c in unknown]
    if errors:
        raise InventoryFileInvalid(errors)
    rows = InventoryRows()
    seen_clusters = set()
    for row in reader:
        line = reader.line_num
        values: dict = {}
        for key in CSV_COLUMNS[1:]:
            raw = (row.get(key) or "").strip()
            if raw == "":
                continue
            if key in ("ssh_port", "npu_count"):
                if not raw.isdecimal():
                    errors.append(FileError(line, key, f"expected a whole number, got {_show(raw)}"))
                    continue
                values[key] = int(raw)
            elif key == "labels":
                labels = {}
                for pair in raw.split(";"):
                    k, sep, v = pair.partition("=")
                    if not sep or not k.strip():
                        errors.append(FileError(line, "labels", f"expected key=value;key=value, got {_show(pair)}"))
                        break
                    labels[k.strip()] = v.strip()
                values["labels"] = labels
            else:
                values[key] = raw
        cluster = (row.get("cluster") or "").strip()
        for key in ("name", "address"):
            if key not in values:
                errors.append(FileError(line, key, "required"))
        if not cluster:
            errors.append(FileError(line, "cluster", "required"))
        elif cluster not in seen_clusters:
            seen_clusters.add(cluster)
            rows.clusters.append(ClusterRow(line, cluster))
        rows.nodes.append(NodeRow(line, cluster, values))
    if errors:
        raise InventoryFileInvalid(errors)
    return rows


def _line(mapping, key) -> int:
    return getattr(mapping, "lines", {}).get(key, getattr(mapping, "start_line", 0))


def _unknown(mapping, allowed, where, errors):
    for key in mapping:
        if key not in allowed:
            errors.append(FileError(_line(mapping, key), f"{where + '.' if where else ''}{key}",
                                    f"unknown field; expected one of {', '.join(sorted(allowed))}"))


def _list(mapping, key, errors, where=""):
    value = mapping.get(key) or []
    if not isinstance(value, list):
        errors.append(FileError(_line(mapping, key), f"{where + '.' if where else ''}{key}", "expected a list"))
        return []
    return value


def _is_map(value, where, line, errors) -> bool:
    if isinstance(value, LinedDict):
        return True
    errors.append(FileError(line, where, f"expected a mapping, got {type(value).__name__}"))
    return False


def _str(mapping, key, where, errors, *, required=False) -> str | None:
    if key not in mapping or mapping[key] is None:
        if required:
            errors.append(FileError(mapping.start_line, f"{where}.{key}", "required"))
        return None
    value = mapping[key]
    if not isinstance(value, str) or (required and not value.strip()):
        errors.append(FileError(_line(mapping, key), f"{where}.{key}", f"expected text, got {_show(value)}"))
        return None
    return value


def looks_like_csv(text: str) -> bool:
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    return bool(re.match(r"^\s*cluster\s*,", first))
