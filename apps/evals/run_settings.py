"""What an operator may set on an eval run, read and checked in one place (API, launch form and sweeps).

Every value is typed and bounded here; the AISBench config file is generated from these values only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from .aisbench import checks
from .choices import ApiStyle, EvalMode

INT_LIMITS = {
    "max_out_len": (1, 1_000_000),
    "concurrency": (1, 1000),
    "num_prompts": (1, 1_000_000),
    "num_warmups": (0, 100),
    "time_limit_s": (30, 7 * 24 * 3600),
}
FLOAT_LIMITS = {"request_rate": (0.0, 10_000.0), "temperature": (0.0, 2.0)}
MAX_SWEEP_POINTS = 12
_TRUE, _FALSE = ("true", "on", "1", True), ("false", "off", "0", False)
FIXED_LENGTH_ACCURACY = ("fixed output length is for performance runs; an accuracy answer must end where the model "
                         "ends it")


class BadRunSettings(ValueError):
    """errors: field name -> what is wrong with it."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


@dataclass(frozen=True)
class RunSettings:
    dataset: str  # a DatasetChoice key: catalogue:<name> | upload:<name>
    mode: str = EvalMode.ACCURACY
    api_style: str = ApiStyle.CHAT
    stream: bool = True
    ignore_eos: bool = False  # fixed output length; applied to the performance pass only
    max_out_len: int = 2048
    concurrency: int = 4
    request_rate: float = 0.0
    temperature: float = 0.6
    num_prompts: int | None = None
    num_warmups: int = 1
    tokenizer_path: str = ""
    time_limit_s: int = 3600

    @classmethod
    def from_dict(cls, data: Mapping | None) -> RunSettings:
        if not isinstance(data, Mapping):
            raise BadRunSettings({"settings": "expected an object"})
        data, values, errors = dict(data), {}, {}
        dataset = data.pop("dataset", None)
        if not isinstance(dataset, str) or not dataset.strip():
            errors["dataset"] = "required: a dataset key such as catalogue:made-up-aime"
        else:
            values["dataset"] = dataset.strip()
        _choice(data, values, errors, "mode", EvalMode.values)
        _choice(data, values, errors, "api_style", ApiStyle.values)
        for name in ("stream", "ignore_eos"):
            if name in data:
                _boolean(data, values, errors, name)
        for name, (low, high) in INT_LIMITS.items():
            if name not in data:
                continue
            raw = data.pop(name)
            if name == "num_prompts" and raw in (None, ""):
                values[name] = None
                continue
            number = _int(raw)
            if number is None or not low <= number <= high:
                errors[name] = f"expected a whole number from {low} to {high}"
            else:
                values[name] = number
        for name, (low, high) in FLOAT_LIMITS.items():
            if name not in data:
                continue
            number = _float(data.pop(name))
            if number is None or not low <= number <= high:
                errors[name] = f"expected a number from {low:g} to {high:g}"
            else:
                values[name] = number
        if "tokenizer_path" in data:
            path = data.pop("tokenizer_path")
            if path in (None, ""):
                values["tokenizer_path"] = ""
            else:
                try:  # the config writer's own check: what passes here is what it writes
                    values["tokenizer_path"] = checks.absolute_path("tokenizer_path", path)
                except ValueError as exc:
                    errors["tokenizer_path"] = ("expected an absolute directory path on the host that runs ais_bench: "
                                                + str(exc).removeprefix("tokenizer_path: "))
        if values.get("ignore_eos") and "mode" not in errors and values.get("mode", cls.mode) == EvalMode.ACCURACY:
            errors["ignore_eos"] = FIXED_LENGTH_ACCURACY
        for name in data:
            errors[name] = f"unknown setting; known: {', '.join(known_names())}"
        if errors:
            raise BadRunSettings(errors)
        return cls(**values)

    def as_dict(self) -> dict:
        return asdict(self)


def known_names() -> tuple[str, ...]:
    return tuple(RunSettings.__dataclass_fields__)


def parse_concurrencies(raw) -> list[int]:
    """A sweep's concurrency series: "1,2,4,8" or [1, 2, 4, 8]; distinct, ascending, within the limits."""
    items = raw.replace(" ", "").split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or not items:
        raise BadRunSettings({"concurrencies": "expected a list of concurrencies such as 1,2,4,8"})
    low, high = INT_LIMITS["concurrency"]
    values = [_int(v) for v in items]
    if any(v is None or not low <= v <= high for v in values):
        raise BadRunSettings({"concurrencies": f"each must be a whole number from {low} to {high}"})
    values = sorted(set(values))
    if not 2 <= len(values) <= MAX_SWEEP_POINTS:
        raise BadRunSettings({"concurrencies": f"give 2 to {MAX_SWEEP_POINTS} different values"})
    return values


def _choice(data, values, errors, name, allowed) -> None:
    if name in data:
        raw = data.pop(name)
        if raw in allowed:
            values[name] = raw
        else:
            errors[name] = f"expected one of {', '.join(allowed)}"


def _boolean(data, values, errors, name) -> None:
    raw = data.pop(name)
    raw = raw.lower() if isinstance(raw, str) else raw
    if raw in _TRUE:
        values[name] = True
    elif raw in _FALSE:
        values[name] = False
    else:
        errors[name] = "expected true or false"


def _int(raw) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw.strip())
    return None


def _float(raw) -> float | None:
    if isinstance(raw, bool):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
