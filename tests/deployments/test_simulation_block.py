"""The topology's optional `simulation` block: what the simulated model answers (sim launch profile only)."""

from __future__ import annotations

import pytest

from apps.deployments.topology import (
    SpecError,
    build_plan,
    spec_diff,
    spec_from_dict,
    spec_from_yaml,
    spec_to_dict,
    spec_to_yaml,
    validate_topology,
)
from apps.deployments.topology.spec import SimulationSpec

BLOCK = {"answer_book": "made-up-aime", "accuracy": 0.6, "think": True}
SIM_ENV = ("SIMCLUSTER_ANSWER_BOOK", "SIMCLUSTER_ACCURACY", "SIMCLUSTER_THINK")


@pytest.fixture
def sim_data(fixed_data):
    return {**fixed_data, "launch_profile": "sim", "simulation": dict(BLOCK)}


def errors_of(data) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data)
    return dict(info.value.errors)


def test_the_block_parses_and_round_trips(sim_data):
    spec = spec_from_dict(sim_data)
    assert spec.simulation == SimulationSpec(answer_book="made-up-aime", accuracy=0.6, think=True)
    assert spec_to_dict(spec)["simulation"] == BLOCK
    assert spec_from_dict(spec_to_dict(spec)) == spec
    assert spec_from_yaml(spec_to_yaml(spec)) == spec


def test_accuracy_and_think_have_defaults(sim_data):
    sim_data["simulation"] = {"answer_book": "made-up-aime", "accuracy": 1}
    assert spec_from_dict(sim_data).simulation == SimulationSpec("made-up-aime", 1.0, False)


def test_specs_without_the_block_stay_as_they_were(fixed_data, fixed_spec):
    assert fixed_spec.simulation is None
    assert "simulation" not in spec_to_dict(fixed_spec)


@pytest.mark.parametrize(("block", "path", "message"), [
    ({"accuracy": 0.5}, "simulation.answer_book", "missing required field"),
    ({**BLOCK, "accuracy": 1.5}, "simulation.accuracy", "expected a number from 0 to 1, got 1.5"),
    ({**BLOCK, "accuracy": -0.1}, "simulation.accuracy", "expected a number from 0 to 1"),
    ({**BLOCK, "accuracy": "0.5"}, "simulation.accuracy", "expected a number from 0 to 1"),
    ({**BLOCK, "accuracy": True}, "simulation.accuracy", "expected a number from 0 to 1"),
    ({**BLOCK, "accuracy": float("nan")}, "simulation.accuracy", "expected a number from 0 to 1"),
    ({**BLOCK, "think": "yes"}, "simulation.think", "expected true or false"),
    ({**BLOCK, "answer_book": "../etc/passwd"}, "simulation.answer_book", "expected a book name"),
    ({**BLOCK, "answer_book": 7}, "simulation.answer_book", "expected a non-empty string"),
    ({**BLOCK, "seed": 3}, "simulation.seed", "unknown field"),
    ("made-up-aime", "simulation", "expected a mapping"),
])
def test_bad_fields_are_named(sim_data, block, path, message):
    sim_data["simulation"] = block
    assert message in errors_of(sim_data)[path]


def test_the_block_is_only_for_the_sim_profile(sim_data, nodes):
    sim_data["launch_profile"] = "vllm-ascend"
    problems = validate_topology(spec_from_dict(sim_data), nodes)
    assert [(p.path, p.suggestion) for p in problems] == [
        ("simulation", "remove the simulation block, or set launch_profile: sim")]


def test_an_unknown_answer_book_is_a_problem(sim_data, nodes):
    sim_data["simulation"]["answer_book"] = "aime2025"
    problems = validate_topology(spec_from_dict(sim_data), nodes)
    assert [p.path for p in problems] == ["simulation.answer_book"]
    assert "aime2025" in problems[0].message and "made-up-aime" in problems[0].suggestion


def test_a_valid_sim_spec_has_no_problems(sim_data, nodes):
    assert validate_topology(spec_from_dict(sim_data), nodes) == []


def test_the_sim_profile_puts_the_block_in_every_engine_env(sim_data, nodes):
    plan = build_plan(spec_from_dict(sim_data), nodes)
    engines = [p for stage in plan.stages if stage.name == "engines" for p in stage.processes]
    assert engines
    for process in engines:
        env = process.launch.env
        assert (env["SIMCLUSTER_ANSWER_BOOK"], env["SIMCLUSTER_ACCURACY"], env["SIMCLUSTER_THINK"]) == (
            "made-up-aime", "0.6", "1")
    others = [p for stage in plan.stages if stage.name != "engines" for p in stage.processes]
    assert not any(name in p.launch.env for p in others for name in SIM_ENV)


def test_think_false_renders_zero(sim_data, nodes):
    sim_data["simulation"] = {"answer_book": "made-up-aime"}
    plan = build_plan(spec_from_dict(sim_data), nodes)
    env = next(p for s in plan.stages for p in s.processes if p.role == "decode").launch.env
    assert (env["SIMCLUSTER_ACCURACY"], env["SIMCLUSTER_THINK"]) == ("1.0", "0")


@pytest.mark.parametrize("name", SIM_ENV)
def test_an_instance_cannot_set_the_rendered_env_itself(sim_data, nodes, name):
    sim_data["instances"][0]["env"] = {name: "1"}
    problems = validate_topology(spec_from_dict(sim_data), nodes)
    assert [p.path for p in problems] == [f"instances[0].env.{name}"]
    assert "simulation." in problems[0].suggestion


def test_diff_shows_a_changed_accuracy(sim_data):
    a = spec_from_dict(sim_data)
    sim_data["simulation"]["accuracy"] = 0.9
    assert spec_diff(a, spec_from_dict(sim_data)) == [("simulation.accuracy", 0.6, 0.9)]
