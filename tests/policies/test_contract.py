"""The policy contract's one source of truth: every parameter's default lives in its Param
alone (a direct call and ``build_policy`` build the same policy, for every policy of both
registries, so a new one is checked the day it is added); a bad value or a broken rule
across parameters is a ParamError naming the parameter; the metric hooks have defaults."""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Callable
from typing import Any, ClassVar, cast

import pytest

from datasched.core.policy import (
    DEFAULT,
    Param,
    ParamError,
    Policy,
    metrics_of,
)
from datasched.policies import build_policy, registry
from datasched.policies.grid.schedulers import (
    DatasetScheduler,
    ExternalScheduler,
    _register,
    build_grid_scheduler,
    grid_schedulers,
)
from datasched.policies.ponce.adaptive import AdaptiveDelay, default_map
from datasched.policies.ponce.delayed import DelayedScheduling

CLUSTER = sorted(registry.available())
GRID = sorted(grid_schedulers())


def _isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_registry", dict(registry.available()))


# -- defaults: in the Param only --------------------------------------------------------------


@pytest.mark.parametrize("name", CLUSTER)
def test_a_direct_call_builds_what_build_policy_builds(name: str) -> None:
    cls = registry.get_policy(name)
    signature = inspect.signature(cls)
    for p in cls.params:
        assert signature.parameters[p.name].default in (DEFAULT, inspect.Parameter.empty)
    # The whole state, nested objects included: a default that drifted shows here.
    assert pickle.dumps(cls()) == pickle.dumps(build_policy(name))
    # No sentinel survives into the policy, wherever the constructor put the value.
    assert "DEFAULT" not in repr(vars(cls()))


@pytest.mark.parametrize("name", GRID)
def test_a_grid_scheduler_built_directly_is_the_declared_one(name: str) -> None:
    cls = grid_schedulers()[name]
    built = build_grid_scheduler(name)
    # The registry's type admits DatasetScheduler itself, whose constructor takes both
    # parameters; every registered class takes none, which this call checks.
    direct = cast("Callable[[], ExternalScheduler | DatasetScheduler]", cls)()
    assert pickle.dumps(direct) == pickle.dumps(built)
    for p in cls.params:
        assert getattr(built, p.name) == p.default_value()


def test_adaptive_delay_has_the_shipped_map_however_it_is_built() -> None:
    shipped = default_map()
    assert AdaptiveDelay().performance_map == shipped
    assert build_policy("adaptive-delay").performance_map == shipped  # type: ignore[attr-defined]
    assert AdaptiveDelay().max_delay_s() > 0
    assert AdaptiveDelay(performance_map=None).performance_map is None
    assert AdaptiveDelay(performance_map=None).max_delay_s() == 0.0


def test_a_value_given_wins_and_default_given_means_the_declared_one() -> None:
    assert DelayedScheduling(period_h=2.0).period_s == 7200.0
    assert DelayedScheduling(period_h=DEFAULT).period_s == 48.0 * 3600
    assert DelayedScheduling(period_h=0.0).period_s == 0.0  # a falsy value is a value


def test_a_literal_default_in_a_constructor_is_refused_at_registration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _isolated_registry(monkeypatch)

    class Drifting(Policy):
        name = "drifting"
        params: ClassVar[tuple[Param, ...]] = (Param("period_h", float, 48.0, "a period"),)

        def __init__(self, *, period_h: float = 24.0) -> None:
            self.period_h = period_h

    with pytest.raises(TypeError, match=r"policy 'drifting': .*'period_h' a default of its own"):
        registry.register(Drifting)
    assert "drifting" not in registry.available()


def test_an_undeclared_or_missing_keyword_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _isolated_registry(monkeypatch)

    class Extra(Policy):
        name = "extra"
        params: ClassVar[tuple[Param, ...]] = (Param("a", int, 1, "a"),)

        def __init__(self, *, a: int = DEFAULT, b: int = DEFAULT) -> None:
            pass

    with pytest.raises(TypeError, match=r"declared parameters \['a'\]"):
        registry.register(Extra)


def test_a_literal_default_in_a_grid_scheduler_is_refused() -> None:
    class Drifting(DatasetScheduler):
        name = "DataDrifting"
        params: ClassVar[tuple[Param, ...]] = (Param("threshold", int, 5, "t"),)

        def __init__(self, *, threshold: int = 3) -> None:
            super().__init__(threshold=threshold, neighbours=0)

    with pytest.raises(TypeError, match=r"grid scheduler 'DataDrifting': .*'threshold'"):
        _register(Drifting)
    assert "DataDrifting" not in grid_schedulers()


def test_an_unregistered_policy_gets_its_declared_defaults_too() -> None:
    """Filling defaults belongs to the class, not to registration: a policy a test or a
    script builds without registering it never sees the sentinel."""

    class Mine(Policy):
        params: ClassVar[tuple[Param, ...]] = (
            Param("n", int, 7, "n"),
            Param("made", object, "a fresh list", "made", factory=lambda: ["fresh"]),
        )

        def __init__(self, *, n: int = DEFAULT, made: Any = DEFAULT) -> None:
            self.n = n
            self.made = made

    one, two = Mine(), Mine()
    assert (one.n, one.made) == (7, ["fresh"])
    assert one.made is not two.made  # a factory makes one per policy
    assert Mine(n=3).n == 3

    class Sub(Mine):  # inherits the constructor and the declaration
        pass

    assert Sub().n == 7


# -- ParamError: typed, naming the parameter --------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "param", "reason"),
    [
        (
            "adaptive-packetizer",
            {"min_packet_s": 30.0},
            "min_packet_s",
            "must not be above max_packet_s",
        ),
        ("basic-packetizer", {"priorities": "a=1", "quotas": "a=50"}, "quotas", "not both"),
        ("basic-packetizer", {"quotas": "a=1,a=2"}, "quotas", "group 'a' is given twice"),
        ("adaptive-packetizer", {"priorities": "a"}, "priorities", "expected GROUP="),
        ("delayed", {"period_h": -1.0}, "period_h", "must be at least 0"),
        ("delayed", {"colour": 1}, "colour", "has no such parameter"),
    ],
)
def test_a_bad_parameter_is_a_param_error_naming_it(
    name: str, params: dict[str, Any], param: str, reason: str
) -> None:
    with pytest.raises(ParamError) as info:
        build_policy(name, **params)
    assert info.value.policy == name
    assert info.value.param == param
    assert reason in info.value.reason
    assert str(info.value) == f"{param}: {info.value.reason}"


def test_a_rule_across_parameters_in_a_direct_call_names_the_parameter() -> None:
    from datasched.policies.proof.policy import AdaptivePacketizerPolicy

    with pytest.raises(ParamError) as info:
        AdaptivePacketizerPolicy(min_packet_s=30.0)
    assert (info.value.policy, info.value.param) == ("adaptive-packetizer", "min_packet_s")


def test_a_plain_value_error_is_not_parsed_for_a_parameter_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A message that merely starts with a parameter's name does not blame that parameter:
    only a ParamError names one."""
    _isolated_registry(monkeypatch)

    class Grumpy(Policy):
        name = "grumpy"
        params: ClassVar[tuple[Param, ...]] = (Param("a", int, 1, "a"),)

        def __init__(self, *, a: int = DEFAULT) -> None:
            raise ValueError("a: the moon is wrong")

    registry.register(Grumpy)
    with pytest.raises(ParamError) as info:
        build_policy("grumpy")
    assert info.value.param == "params"
    assert info.value.reason == "a: the moon is wrong"


# -- metric hooks: defaults on Policy ---------------------------------------------------------


def test_a_policy_keeping_no_metrics_answers_the_defaults() -> None:
    farm = build_policy("farm")
    assert metrics_of(farm) is farm
    assert (farm.counters(), farm.held_jobs(), farm.max_delay_s()) == ({}, 0, 0.0)


def test_policies_override_only_the_metrics_they_keep() -> None:
    delayed = build_policy("delayed", period_h=2.0)
    assert delayed.max_delay_s() == 7200.0
    assert delayed.counters() == {}
    ooo = build_policy("out-of-order")
    assert set(ooo.counters()) == {"fairness_fired", "replications", "replicated_jobs"}
    assert ooo.held_jobs() == 0
    assert ooo.max_delay_s() == 0.0
    flow = build_policy("mincostflow", lp_period_s=30.0)
    assert flow.max_delay_s() == 30.0
    assert flow.held_jobs() == 0
    assert {"local_copies", "batches"} <= set(flow.counters())
    assert build_policy("basic-packetizer").counters() == {"forced packets": 0}
