"""Reads settings from the environment; in production a missing required setting stops start-up, naming it."""

import os
from pathlib import Path


class MissingSetting(RuntimeError):
    pass


def production() -> bool:
    return os.environ.get("PDCP_MODE", "development").lower() == "production"


def env_str(name: str, default: str | None = None, *, required_in_production: bool = False) -> str:
    value = os.environ.get(name)
    if value:
        return value
    if required_in_production and production():
        raise MissingSetting(
            f"{name} is required when PDCP_MODE=production (set it in the environment; see docs/configuration.md)"
        )
    if default is None:
        raise MissingSetting(f"{name} is not set")
    return default


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise MissingSetting(f"{name} must be true or false, got {value!r}")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise MissingSetting(f"{name} must be a whole number, got {value!r}") from None
    if number < minimum:
        raise MissingSetting(f"{name} must be at least {minimum}, got {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def data_dir(base: Path) -> Path:
    path = Path(os.environ.get("PDCP_DATA_DIR", base / "data"))
    path.mkdir(parents=True, exist_ok=True)
    return path
