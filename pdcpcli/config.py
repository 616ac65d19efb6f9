"""Where pdcp finds the server and its token: PDCP_URL / PDCP_TOKEN, else the config file (PDCP_CONFIG or
~/.config/pdcp/config.toml, keys `url` and `token`), which must be private to its owner (0600) as it holds a
token. `pdcp login` writes it."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path


class ConfigError(Exception):
    """The configuration cannot be used; the message says what to do."""


@dataclass
class Config:
    url: str | None
    token: str | None
    path: Path
    ca_bundle: str | None = None


def config_path() -> Path:
    if os.environ.get("PDCP_CONFIG"):
        return Path(os.environ["PDCP_CONFIG"]).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "pdcp" / "config.toml"


def read_file(path: Path) -> dict:
    """The config file's keys; {} when there is none. Refuses one that others may read or write."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{path} is not a file")
    if info.st_mode & 0o077:
        raise ConfigError(f"{path} holds a token but is mode {stat.S_IMODE(info.st_mode):04o}: "
                          f"run `chmod 600 {path}`")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    for key in ("url", "token", "ca_bundle"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"{path}: {key} must be a string")
    return data


def load() -> Config:
    """The environment wins over the file, key by key."""
    path = config_path()
    env_url, env_token = os.environ.get("PDCP_URL"), os.environ.get("PDCP_TOKEN")
    data = {} if env_url and env_token else read_file(path)  # the environment alone is enough
    url = env_url or data.get("url")
    return Config(url=url.rstrip("/") if url else None, token=env_token or data.get("token"), path=path,
                  ca_bundle=os.environ.get("PDCP_CA_BUNDLE") or data.get("ca_bundle"))


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string (ASCII, \" \\ \n \uXXXX escapes) is a TOML basic string


def save(path: Path, values: dict) -> None:
    """Writes the file 0600 (its folder 0700 when created), keeping keys it does not set."""
    try:
        kept = read_file(path)
    except ConfigError:
        kept = {}
    kept.update(values)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = "".join(f"{key} = {_toml_string(str(value))}\n" for key, value in kept.items() if value is not None)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
