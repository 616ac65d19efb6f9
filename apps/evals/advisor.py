"""The P:D ratio advisor: from measured performance runs, which layout met a TTFT/TPOT target at the highest output
throughput per NPU. Advisory and from measured runs only: nothing is extrapolated between concurrencies or layouts.

Plain records in (apps/evals/advisor_selectors.py builds them from EvalRun rows), plain results out; no Django.
Only like is compared with like: runs are grouped by model + dataset + output length policy (fixed at max_out_len, the
server ignoring end-of-sequence, or up to max_out_len) and one group is advised on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .advisor_layout import Layout, LayoutUnreadable, layout_of

# the statistic a user picks -> its key in perf_percentiles; a run has the percentile columns its file had
STATS = {"mean": "avg", "median": "median", "p50": "p50", "p75": "p75", "p90": "p90", "p95": "p95", "p99": "p99"}
SAME_STAT = {"median": "p50", "p50": "median"}  # one statistic under two names: either column serves
DEFAULT_STAT = "p90"
MAX_TARGET_MS = 10_000_000.0


@dataclass(frozen=True)
class RunRecord:
    """What the advisor needs of one finished performance run; latencies in ms by stored stat key (avg, p90...)."""

    run_id: int
    sweep_id: int | None
    deployment: str
    revision: int
    model: str
    dataset: str
    max_out_len: int
    api_style: str
    concurrency: int
    output_throughput: float | None  # token/s
    request_throughput: float | None  # req/s
    ttft: Mapping[str, float]
    tpot: Mapping[str, float]
    input_tokens_mean: float | None
    spec: object  # the stored revision_spec copy
    ignore_eos: bool = False  # fixed output length: every answer max_out_len tokens


FIXED = "fixed:"  # the output part of a group key's text for a fixed output length: fixed:1500


@dataclass(frozen=True)
class GroupKey:
    model: str
    dataset: str
    max_out_len: int
    fixed_length: bool = False  # every answer max_out_len tokens (ignore EOS); else up to max_out_len

    @property
    def text(self) -> str:
        return f"{self.model}|{self.dataset}|{FIXED if self.fixed_length else ''}{self.max_out_len}"

    @property
    def output_text(self) -> str:
        return f"{'fixed' if self.fixed_length else 'up to'} {self.max_out_len} tokens"

    @classmethod
    def parse(cls, text: str) -> GroupKey:
        parts = text.rsplit("|", 2)
        length = parts[-1].removeprefix(FIXED)
        if len(parts) != 3 or not parts[0] or not parts[1] or not length.isdecimal():
            raise ValueError("expected <model>|<dataset>|<max_out_len> (up to that many tokens) or "
                             f"<model>|<dataset>|{FIXED}<max_out_len> (fixed output length), e.g. "
                             f"qwen3-235b|catalogue:gsm8k|2048 or qwen3-235b|catalogue:gsm8k|{FIXED}1500")
        return cls(parts[0], parts[1], int(length), parts[-1].startswith(FIXED))


def group_of(record: RunRecord) -> GroupKey:
    return GroupKey(record.model, record.dataset, record.max_out_len, record.ignore_eos)


@dataclass(frozen=True)
class Group:
    key: GroupKey
    runs: int
    api_styles: tuple[str, ...]
    input_tokens: tuple[float, float] | None  # the lowest and highest mean input length of its runs


def groups_of(records: list[RunRecord]) -> list[Group]:
    """Every group, the one with the most runs first."""
    members: dict[GroupKey, list[RunRecord]] = {}
    for record in records:
        members.setdefault(group_of(record), []).append(record)
    groups = []
    for key, runs in members.items():
        lengths = [r.input_tokens_mean for r in runs if _is_number(r.input_tokens_mean)]
        groups.append(Group(key, len(runs), tuple(sorted({r.api_style for r in runs})),
                             (min(lengths), max(lengths)) if lengths else None))
    return sorted(groups, key=lambda g: (-g.runs, g.key.text))


@dataclass(frozen=True)
class Targets:
    ttft_ms: float | None  # None: no TTFT limit
    tpot_ms: float | None
    stat: str = DEFAULT_STAT

    @property
    def text(self) -> str:
        limits = [f"{name} {self.stat} ≤ {_ms(value)} ms"
                  for name, value in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms)) if value is not None]
        return " and ".join(limits) if limits else "no latency target"


class BadAdvisorQuery(ValueError):
    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


def _target(raw: str | None, name: str, errors: dict) -> float | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= MAX_TARGET_MS:
        errors[name] = f"expected milliseconds above 0 and at most {MAX_TARGET_MS:,.0f}, got {raw!r}"
        return None
    return value


def parse_query(params: Mapping[str, str]) -> tuple[Targets, GroupKey | None]:
    """The page's and the API's parameters; BadAdvisorQuery names every bad one."""
    errors: dict[str, str] = {}
    ttft, tpot = _target(params.get("ttft_ms"), "ttft_ms", errors), _target(params.get("tpot_ms"), "tpot_ms", errors)
    stat = params.get("stat") or DEFAULT_STAT
    if stat not in STATS:
        errors["stat"] = f"unknown statistic {stat!r}; choose one of {', '.join(STATS)}"
    group = None
    if params.get("group"):
        try:
            group = GroupKey.parse(params["group"])
        except ValueError as exc:
            errors["group"] = str(exc)
    if errors:
        raise BadAdvisorQuery(errors)
    return Targets(ttft, tpot, stat), group


@dataclass(frozen=True)
class Point:
    """One measured run judged against the targets."""

    record: RunRecord
    per_npu: float  # output token/s per NPU (Prefill + Decode)
    ttft_ms: float | None  # at the chosen statistic
    tpot_ms: float | None
    meets: bool | None  # None: a targeted statistic was not stored, so it cannot be judged
    excess: float | None  # the worst measured/target ratio over the targets given (<= 1 when met)
    misses: tuple[str, ...] = ()


@dataclass
class LayoutAdvice:
    layout: Layout
    points: list[Point]  # by concurrency
    best: Point | None = None  # the met run with the highest throughput per NPU
    closest_miss: Point | None = None  # when none met: the run nearest the targets

    @property
    def unjudged(self) -> int:
        return sum(p.meets is None for p in self.points)


@dataclass(frozen=True)
class Unreadable:
    record: RunRecord
    reason: str


@dataclass
class Advice:
    targets: Targets
    group: GroupKey | None
    layouts: list[LayoutAdvice]  # the recommendation first, then the other met ones, then the misses
    unreadable: list[Unreadable] = field(default_factory=list)
    runs: int = 0  # measured runs the advice rests on (readable layouts)

    @property
    def recommendation(self) -> LayoutAdvice | None:
        return self.layouts[0] if self.layouts and self.layouts[0].best else None

    @property
    def text(self) -> str:
        return advice_text(self)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _ms(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e6 else f"{value:,.0f}"


def _measured(stats: Mapping[str, float], stat: str) -> float | None:
    """The run's figure at the statistic a user picked; None when its results have no such column."""
    for key in (STATS[stat], SAME_STAT.get(stat)):
        if key and _is_number(stats.get(key)):
            return stats[key]
    return None


def _not_stored(name: str, stats: Mapping[str, float], stat: str) -> str:
    """Says that a run's results lack the statistic, and which of the choosable ones they have."""
    present = [s for s in STATS if s != stat and _measured(stats, s) is not None]
    has = f"it has {', '.join(present)}" if present else f"it has no {name} statistic the advisor can judge"
    return f"{name} {stat} not in this run's results ({has})"


def _judge(record: RunRecord, layout: Layout, targets: Targets) -> Point:
    ttft, tpot = _measured(record.ttft, targets.stat), _measured(record.tpot, targets.stat)
    ratios, misses, unjudged = [], [], False
    for name, stats, measured, target in (("TTFT", record.ttft, ttft, targets.ttft_ms),
                                          ("TPOT", record.tpot, tpot, targets.tpot_ms)):
        if target is None:
            continue
        if measured is None:
            unjudged = True
            misses.append(_not_stored(name, stats, targets.stat))
            continue
        ratios.append(measured / target)
        if measured > target:
            misses.append(f"{name} {targets.stat} {measured:.1f} ms > {_ms(target)} ms "
                          f"(+{(measured / target - 1) * 100:.0f}%)")
    meets = None if unjudged else not any(r > 1 for r in ratios)
    return Point(record, record.output_throughput / layout.total_npus, ttft, tpot, meets,
                 max(ratios) if ratios and not unjudged else None, tuple(misses))


def _best_order(point: Point):
    """Highest throughput per NPU; a tie goes to the lower TTFT, then the lower TPOT, then the older run."""
    inf = math.inf
    return (-point.per_npu, point.ttft_ms if point.ttft_ms is not None else inf,
            point.tpot_ms if point.tpot_ms is not None else inf, point.record.run_id)


def _layout_order(advice: LayoutAdvice):
    if advice.best:
        return (0, *_best_order(advice.best))
    if advice.closest_miss:
        return (1, advice.closest_miss.excess, *_best_order(advice.closest_miss))
    return (2, advice.layout.key)


def advise(records: list[RunRecord], targets: Targets, group: GroupKey | None) -> Advice:
    """Judge every run of the group with a readable layout and output throughput; rank the layouts."""
    chosen = [r for r in records if group is None or group_of(r) == group]
    by_layout: dict[Layout, list[Point]] = {}
    unreadable = []
    for record in chosen:
        if not _is_number(record.output_throughput):
            continue
        try:
            layout = layout_of(record.spec)
        except LayoutUnreadable as exc:
            unreadable.append(Unreadable(record, str(exc)))
            continue
        by_layout.setdefault(layout, []).append(_judge(record, layout, targets))
    layouts = []
    for layout, points in by_layout.items():
        advice = LayoutAdvice(layout, sorted(points, key=lambda p: (p.record.concurrency, p.record.run_id)))
        met = [p for p in points if p.meets]
        missed = [p for p in points if p.meets is False]
        if met:
            advice.best = min(met, key=_best_order)
        elif missed:
            advice.closest_miss = min(missed, key=lambda p: (p.excess, *_best_order(p)))
        layouts.append(advice)
    layouts.sort(key=_layout_order)
    return Advice(targets, group, layouts, unreadable, sum(len(a.points) for a in layouts))


def _basis(advice: Advice) -> str:
    runs, layouts = advice.runs, len(advice.layouts)
    return f"{runs} measured run{'s' if runs != 1 else ''} on {layouts} layout{'s' if layouts != 1 else ''}"


def _unjudged_text(advice: Advice) -> str:
    runs = [p.record.run_id for a in advice.layouts for p in a.points if p.meets is None]
    if not runs:
        return ""
    names = ", ".join(f"#{run}" for run in sorted(runs))
    return (f" Not judged: {names}, whose results have no {advice.targets.stat} for a targeted latency; pick a "
            f"statistic they have.")


def _verdict_text(advice: Advice) -> str:
    best = advice.recommendation
    if best:
        p = best.best
        return (f"From {_basis(advice)}: {best.layout.key} (P:D {best.layout.ratio_npus} by NPUs, "
                f"{best.layout.ratio_instances} by instances) had the highest output throughput per NPU that met "
                f"{advice.targets.text}: {p.per_npu:,.1f} token/s per NPU at concurrency {p.record.concurrency} "
                f"(run #{p.record.run_id}). Advice from measured runs only; layouts or concurrencies not measured "
                f"may do better.")
    miss = next((a for a in advice.layouts if a.closest_miss), None)
    closest = (f" The closest miss: {miss.layout.key}, run #{miss.closest_miss.record.run_id} at concurrency "
               f"{miss.closest_miss.record.concurrency} ({'; '.join(miss.closest_miss.misses)})." if miss else "")
    return f"No measured layout meets the target ({advice.targets.text}), judged from {_basis(advice)}.{closest}"


def advice_text(advice: Advice) -> str:
    if not advice.layouts:
        return ("No measured runs to advise from: run a performance sweep on each P:D layout with the same model, "
                "dataset and output length (fixed or up to the same max output length).")
    return _verdict_text(advice) + _unjudged_text(advice)
