"""The cost model (simcluster/profiles.py) stays within calibration.RATIO_LIMIT of the published Ascend figures
(simcluster/calibration.py), computed from the model functions by the virtual-time replay; no engine runs."""

from __future__ import annotations

import dataclasses

import pytest

from simcluster import calibration, profiles

ASSERTED = [(case, name) for case in calibration.CASES for name in case.figures if case.asserts(name)]


def within(ratio: float) -> bool:
    return 1 / calibration.RATIO_LIMIT <= ratio <= calibration.RATIO_LIMIT


@pytest.fixture(scope="module")
def table():
    return calibration.rows()


@pytest.mark.parametrize(("case", "figure"), ASSERTED, ids=[f"{c.key}:{f}" for c, f in ASSERTED])
def test_published_figure_within_ratio(table, case, figure):
    row = next(r for r in table if r["case"] is case and r["figure"] == figure)
    assert within(row["ratio"]), (f"{case.key} {figure}: model {row['model']:.4g} vs published "
                                  f"{row['published']:g} ({case.source}), ratio {row['ratio']:.2f}")


def test_pd_over_mixed_within_ratio(table):
    row = next(r for r in table if r["figure"] == "pd_over_mixed")
    assert row["model"] > 1.0, "PD must beat PD-mixed on the same dies, as published"
    assert within(row["ratio"]), row


def test_every_profile_that_is_fitted_has_an_asserted_row():
    fitted = {case.profile for case, _ in ASSERTED}
    assert fitted == {"deepseek-r1", "qwen3-235b"}
    assert len(ASSERTED) >= 6


def test_rows_are_well_formed():
    for case in calibration.CASES:
        assert case.figures and set(case.figures) <= set(calibration.FIGURES), case.key
        assert case.source and case.hardware and case.profile in profiles.PROFILES, case.key
        assert (case.mixed is None) != (case.prefill is None and case.decode is None), case.key
        assert all(v > 0 for v in case.figures.values()), case.key


def test_replay_uses_the_cost_functions_exactly():
    """One request on an idle rank: TTFT is one prefill, every later token one batch-of-1 decode step."""
    profile = profiles.PROFILES["deepseek-r1"]
    case = calibration.Case("one", "deepseek-r1", "A3", 1000, 11, 1, 0.0, 1, {"tpot_ms": 1.0}, "test",
                            mixed=calibration.Role(1, 1, 8, 4))
    figures = calibration.replay(case)
    assert figures["ttft_median_ms"] == pytest.approx(1000 * profiles.prefill_seconds(profile, 1000, 8, scale=1))
    assert figures["tpot_ms"] == pytest.approx(1000 * profiles.itl_seconds(profile, 1, 8, scale=1))


def test_replay_of_pd_waits_for_decode_slots():
    """A Decode with 2 slots and 4 requests at once: the last two start decoding when the first two finish (the
    median TTFT lies halfway between the two pairs')."""
    profile = profiles.PROFILES["qwen3-235b"]
    case = calibration.Case("pd", "qwen3-235b", "A3", 100, 6, 4, 0.0, 4, {"tpot_ms": 1.0}, "test",
                            prefill=calibration.Role(1, 1, 8, 8), decode=calibration.Role(1, 1, 4, 2))
    figures = calibration.replay(case)
    step = profiles.itl_seconds(profile, 2, 4, scale=1)
    assert figures["tpot_ms"] == pytest.approx(1000 * step)
    prefill = profiles.prefill_seconds(profile, 400, 8, scale=1)  # the four prompts share one step
    assert figures["ttft_median_ms"] == pytest.approx(1000 * (prefill + 2.5 * step), rel=1e-6)


def test_replay_ignores_the_environment_time_scale(monkeypatch):
    case = calibration.case_named("qwen3-235b-1p1d")
    monkeypatch.setenv("SIMCLUSTER_TIME_SCALE", "1")
    at_one = calibration.predict(case)["output_tps"]
    monkeypatch.setenv("SIMCLUSTER_TIME_SCALE", "0.05")
    assert calibration.predict(case)["output_tps"] == pytest.approx(at_one)


@pytest.mark.parametrize("field", ["itl_base_s_tp1", "prefill_s_per_token_tp1"])
def test_a_mistuned_profile_fails_the_check(field):
    """The check has teeth: doubling a fitted constant moves some asserted figure out of the ratio."""
    broken = {name: dataclasses.replace(p, **{field: getattr(p, field) * 2}) for name, p in profiles.PROFILES.items()}
    out = [r for r in calibration.rows(broken) if r["asserted"] and not within(r["ratio"])]
    assert out, f"doubling {field} left every asserted figure within {calibration.RATIO_LIMIT}"


def test_ignore_eos_runs_to_max_tokens():
    """The bench and AISBench's perf mode need outputs of the published length: ignore_eos lifts the natural stop."""
    from simcluster.engine.core import Request
    from simcluster.engine.textgen import natural_length, tokenize

    tokens = tokenize("why is the sky blue")
    plain = Request("a", tokens, max_tokens=1500, need_prefill_tokens=len(tokens))
    forced = Request("b", tokens, max_tokens=1500, need_prefill_tokens=len(tokens), ignore_eos=True,
                     script=[(7, " x")])
    assert plain.stop_at == natural_length(tokens) < 1500
    assert forced.stop_at == 1500
    assert forced.token(0) == (7, " x") and forced.token(1) == plain.token(1)
