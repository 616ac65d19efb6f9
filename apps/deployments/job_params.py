"""What an operator may set on a deployment job, read and checked in one place.

The API serializers, the deployment page's job buttons and the services all go through JobParams.from_dict, so a
bad value gets the same field-named error, and each number the same limit, whichever way it came in. Job.params
stores as_dict(); the job handlers read it back with JobParams.stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from apps.jobs.choices import JobKind

# The one limit of each whole-number option, (lowest, highest).
LIMITS: Mapping[str, tuple[int, int]] = {
    "max_parallel": (1, 256),  # SSH fan-out bound
    "health_timeout": (1, 3600),  # seconds each stage may take to answer its health checks
    "stop_grace": (1, 600),  # seconds between TERM and KILL
}
SWITCHES = ("keep_on_failure", "sequential")
ROLES = ("prefill", "decode")
# What a form or a JSON body may spell true/false as (a page checkbox sends "on").
_TRUE, _FALSE = ("true", "on", "1"), ("false", "off", "0")
_DIGITS = re.compile(r"^\d+$")


class BadJobParams(ValueError):
    """errors: field name -> what is wrong with it."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


@dataclass(frozen=True)
class JobParams:
    max_parallel: int = 8
    health_timeout: int = 120
    stop_grace: int = 10
    keep_on_failure: bool = False  # leave what a failed job started running
    instance: str | None = None  # restart: the instance
    role: str | None = None  # rolling restart: the role whose instances restart one by one

    @classmethod
    def from_dict(cls, data: Mapping | None, *, kind: str = JobKind.DEPLOY) -> JobParams:
        """Params of a job of `kind` from plain data (JSON body, form fields, keyword dict); BadJobParams names
        every bad field. `sequential: true` means max_parallel 1."""
        if data is not None and not isinstance(data, Mapping):
            raise BadJobParams({"params": "expected an object of job parameters"})
        data, values, errors = dict(data or {}), {}, {}
        for name, (low, high) in LIMITS.items():
            if name in data:
                _take(values, errors, name, _whole_number(data.pop(name), low, high))
        for name in SWITCHES:
            if name in data:
                _take(values, errors, name, _switch(data.pop(name)))
        if values.pop("sequential", False):
            values["max_parallel"] = 1
        needed = _kind_field(kind)
        if needed:
            _take(values, errors, needed, _kind_value(needed, data.pop(needed, None)))
        for name in data:
            errors[name] = f"unknown parameter; known: {', '.join(known_names(kind))}"
        if errors:
            raise BadJobParams(errors)
        return cls(**values)

    @classmethod
    def stored(cls, params: Mapping) -> JobParams:
        """What a job was started with (Job.params, checked then); other keys of it are ignored."""
        return cls(**{f.name: params[f.name] for f in fields(cls) if f.name in params})

    def as_dict(self) -> dict:
        """What Job.params keeps: the options, and instance or role when the kind has one."""
        return {k: v for k, v in asdict(self).items() if v is not None or k not in ("instance", "role")}


def known_names(kind: str = JobKind.DEPLOY) -> tuple[str, ...]:
    needed = _kind_field(kind)
    return (*LIMITS, *SWITCHES, *((needed,) if needed else ()))


def _kind_field(kind: str) -> str | None:
    return {JobKind.RESTART: "instance", JobKind.ROLLING_RESTART: "role"}.get(kind)


def _take(values: dict, errors: dict, name: str, outcome: tuple[object, str | None]) -> None:
    value, error = outcome
    if error:
        errors[name] = error
    else:
        values[name] = value


def _whole_number(value, low: int, high: int) -> tuple[int | None, str | None]:
    if isinstance(value, str) and _DIGITS.match(value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None, f"expected a whole number from {low} to {high}"
    return value, None


def _switch(value) -> tuple[bool | None, str | None]:
    if isinstance(value, bool):
        return value, None
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text in _TRUE or text in _FALSE:
        return text in _TRUE, None
    return None, "expected true or false"


def _kind_value(name: str, value) -> tuple[str | None, str | None]:
    if name == "role":
        return (value, None) if value in ROLES else (None, f"expected {' or '.join(ROLES)}")
    if not isinstance(value, str) or not value.strip():
        return None, "required: the name of an instance of the active revision"
    return value.strip(), None
