"""Every FLEET_* variable is parsed one way (core.setting): each kind by a table, and a bad
value names the variable, the value and the fix."""

import pytest

from core import registry
from core.errors import ConfigError
from core.registry import FLEET_ADOPT_UNPUBLISHED, FLEET_BROKER_URL, FLEET_LEASE_TTL_S, FLEET_YIELD
from core.setting import BOOL, PortRange, Scope, Setting, Source

TRUE_SPELLINGS = ["1", "true", "yes", "on", "TRUE", "Yes", "ON", " on "]
FALSE_SPELLINGS = ["0", "false", "no", "off", "FALSE", "No", "Off"]


@pytest.mark.parametrize("raw", TRUE_SPELLINGS)
def test_every_true_spelling_reads_as_true_for_every_boolean(raw):
    for s in registry.SETTINGS:
        if s.kind is BOOL:
            assert s.value({s.name: raw}) is True, s.name


@pytest.mark.parametrize("raw", FALSE_SPELLINGS)
def test_every_false_spelling_reads_as_false_for_every_boolean(raw):
    for s in registry.SETTINGS:
        if s.kind is BOOL:
            assert s.value({s.name: raw}) is False, s.name


def test_adopt_unpublished_and_yield_accept_the_same_spellings():
    # they once had parsers of their own: "on" stopped a worker for one and worked for the other
    env = {"FLEET_ADOPT_UNPUBLISHED": "on", "FLEET_YIELD": "on"}
    adopt, yielding = FLEET_ADOPT_UNPUBLISHED.value(env), FLEET_YIELD.value(env)
    assert adopt is yielding is True


@pytest.mark.parametrize(
    "setting, raw, want",
    [
        (registry.FLEET_LEASE_TTL_S, "30", 30.0),
        (registry.FLEET_LEASE_TTL_S, " 2.5 ", 2.5),
        (registry.FLEET_YIELD_RECLAIM_S, "0", 0.0),
        (registry.FLEET_DATA_CACHE_GIB, "0.5", 0.5),
        (registry.FLEET_WORKDIR_MAX_MIB, "500", 500.0),
        (registry.FLEET_REDIS_WAIT_REPLICAS, "0", 0),
        (registry.FLEET_GPU_RESERVE_CORES, "2", 2),
        (registry.FLEET_GPU_RESERVE_RAM_GIB, "0", 0.0),
        (registry.FLEET_STORE_URL, "s3://bucket/prefix", "s3://bucket/prefix"),
        (registry.FLEET_YIELD_IGNORE, "Xorg, gnome-shell", ("Xorg", "gnome-shell")),
        (registry.FLEET_OWNER, " alice ", "alice"),
        (registry.FLEET_GANG_PORTS, "29500-29599", PortRange(29500, 29599)),
        (registry.FLEET_GANG_PORTS, " 29500 ", PortRange(29500, 29500)),
    ],
)
def test_a_good_value_parses_to_its_kind(setting, raw, want):
    assert setting.value({setting.name: raw}) == want
    assert setting.source({setting.name: raw}) is Source.ENV


@pytest.mark.parametrize(
    "setting, raw, expected",
    [
        (registry.FLEET_ADOPT_UNPUBLISHED, "maybe", "1 or 0"),
        (registry.FLEET_YIELD, "2", "1 or 0"),
        (registry.FLEET_LEASE_TTL_S, "soon", "seconds > 0"),
        (registry.FLEET_LEASE_TTL_S, "0", "seconds > 0"),
        (registry.FLEET_LEASE_TTL_S, "-5", "seconds > 0"),
        (registry.FLEET_YIELD_RECLAIM_S, "-1", "seconds >= 0"),
        (registry.FLEET_DATA_CACHE_GIB, "lots", "GiB > 0"),
        (registry.FLEET_WORKDIR_MAX_MIB, "0", "MiB > 0"),
        (registry.FLEET_REDIS_WAIT_REPLICAS, "1.5", "whole number"),
        (registry.FLEET_GPU_RESERVE_CORES, "-1", "whole number"),
        (registry.FLEET_STORE_URL, "bucket/prefix", "URL"),
        (registry.FLEET_GANG_PORTS, "29599-29500", "port range FIRST-LAST"),
        (registry.FLEET_GANG_PORTS, "0-100", "within 1-65535"),
        (registry.FLEET_GANG_PORTS, "65000-70000", "within 1-65535"),
        (registry.FLEET_GANG_PORTS, "many", "port range"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_variable_the_value_and_the_fix(setting, raw, expected):
    name = setting.name
    with pytest.raises(ConfigError) as e:
        setting.value({name: raw})
    message = str(e.value)
    assert message.startswith(f"{name}={raw!r}: expected") and expected in message
    assert f"e.g. {name}=" in message and "unset it for the default" in message


def test_a_bad_secret_is_named_but_not_shown():
    with pytest.raises(ConfigError) as e:
        FLEET_BROKER_URL.value({"FLEET_BROKER_URL": "hunter2-not-a-url"})
    assert "FLEET_BROKER_URL=***" in str(e.value) and "hunter2" not in str(e.value)


@pytest.mark.parametrize("raw", ["", "   "])
def test_an_empty_value_counts_as_unset(raw):
    assert FLEET_LEASE_TTL_S.value({"FLEET_LEASE_TTL_S": raw}) == 60.0
    assert FLEET_LEASE_TTL_S.source({"FLEET_LEASE_TTL_S": raw}) is Source.DEFAULT


def test_every_variable_is_declared_once_with_a_doc_and_a_default_said_in_words():
    names = [s.name for s in registry.SETTINGS]
    assert len(names) == len(set(names))
    for s in registry.SETTINGS:
        assert isinstance(s, Setting) and s.name.startswith("FLEET_") and s.doc, s.name
        assert s.default_text and s.example_value, s.name


def test_a_misspelt_variable_fails_at_import():
    with pytest.raises(ImportError, match="FLEET_LEASE_TTL"):
        exec("from core.registry import FLEET_LEASE_TTL", {})


def test_every_setting_is_bound_to_its_own_name():
    assert all(getattr(registry, s.name) is s for s in registry.SETTINGS)


def test_a_setting_bound_under_another_name_is_refused():
    s = registry.FLEET_LEASE_TTL_S
    with pytest.raises(ConfigError, match="FLEET_TTL = Setting\\('FLEET_LEASE_TTL_S'"):
        registry._declared({"FLEET_TTL": s})


def test_a_setting_without_a_default_is_typed_as_maybe_none():
    import typing

    hints = typing.get_type_hints(registry)
    for s in registry.SETTINGS:
        if s.default is None:
            assert type(None) in typing.get_args(typing.get_args(hints[s.name])[0]), s.name


def test_check_reports_every_bad_value_not_only_the_first():
    problems = registry.check({"FLEET_YIELD": "maybe", "FLEET_LEASE_TTL_S": "x"})
    assert sorted(str(p).split("=")[0] for p in problems) == ["FLEET_LEASE_TTL_S", "FLEET_YIELD"]


def test_the_variables_given_to_jobs_are_the_ones_the_trainers_and_the_supervisor_read():
    # trainers.protocol (the trainers' side of the contract) and tasks.supervisor (standard
    # library only) keep these names as plain strings: the registry declares exactly those
    from tasks import runscope, supervisor
    from trainers import protocol

    given = {s.name for s in registry.SETTINGS if s.scope is Scope.JOB}
    named = {v for k, v in vars(protocol).items() if k.startswith("ENV_") and isinstance(v, str)}
    named |= {supervisor.PARENT_ENV, supervisor.EXIT_ENV, supervisor.AFFINITY_ENV}
    named |= {supervisor.SCOPE_ENV, supervisor.CGROUP_ENV}
    assert given == named
    assert (runscope.ENV, runscope.CGROUP_ENV) == (supervisor.SCOPE_ENV, supervisor.CGROUP_ENV)
