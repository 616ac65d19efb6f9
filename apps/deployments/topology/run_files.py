"""Files of a deployment below its run_dir on the proxy node that the launch profile names on a command line and
the jobs write before a start, so both derive them from the spec alone."""

from __future__ import annotations

from pathlib import PurePosixPath

from .spec import TopologySpec


def admin_token_path(spec: TopologySpec) -> PurePosixPath:
    """The proxy admin API's bearer token; the proxy reads it at start (--admin-token-file)."""
    return PurePosixPath(spec.run_dir) / "secrets" / "proxy-admin.token"


def admin_header_path(spec: TopologySpec) -> PurePosixPath:
    """The same token as an HTTP header line, for `curl -H @file` on the proxy node (never on a command line)."""
    return PurePosixPath(spec.run_dir) / "secrets" / "proxy-admin.header"


def config_path(spec: TopologySpec, name: str) -> PurePosixPath:
    """A config file a process reads (mooncake.json, mmc-local.conf): the deploy writes it on the node, stop removes it."""
    return PurePosixPath(spec.run_dir) / "config" / name
