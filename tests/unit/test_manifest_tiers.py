"""Tiers, hosts and routing at load: custom tiers replace the defaults, host policies name
known tiers and models, and a job no tier or host can take is a problem with a fix."""

import pytest

from fleet.manifests import load
from manifest.schema import HostPolicy, Needs
from routing.tiers import DEFAULT_TIERS, route
from tests.unit.manifest_cases import CPU_ONLY, GBT, only_problem, problems, write


def test_a_cuda_job_with_no_cuda_tier_is_named_with_a_tier_to_add(tmp_path):
    p = only_problem(tmp_path, CPU_ONLY + GBT + "require_cuda = true\nmin_vram_gib = 80\n")
    assert (p.line, p.field) == (4, "jobs[0]")
    assert p.message == "job 'a' needs CUDA, min_vram_gib=80 and no tier guarantees it"
    assert p.fix == (
        "add a tier whose floor covers it, e.g. [tiers.cuda-big] with "
        "require_cuda = true, min_vram_gib = 80, or lower the job's needs"
    )


@pytest.mark.parametrize(
    "needs, queue",
    [
        ("require_cuda = true\nmin_vram_gib = 80\n", "cuda.vram80"),
        ("min_cores = 64\n", "cpu.cores64"),
    ],
)
def test_a_job_needing_more_than_every_floor_goes_to_a_need_queue_not_an_error(
    tmp_path, needs, queue
):
    m = load(write(tmp_path, GBT + needs))
    assert route(m.jobs[0], m.tiers, m.hosts).queue == queue


def test_a_job_whose_only_allowed_host_refuses_its_model_can_run_nowhere(tmp_path):
    text = '[hosts.h1]\ndeny_models = ["gbt"]\n\n' + GBT + 'allowed_hosts = ["h1"]\n'
    p = only_problem(tmp_path, text)
    assert (p.line, p.field) == (9, "jobs[0].allowed_hosts")
    assert p.message == (
        "job 'a' can run on no host: every allowed host is denied "
        "(by denied_hosts or a host's model policy)"
    )
    assert p.fix == "allow a host that accepts it"


def test_a_job_allowed_on_a_host_outside_the_allow_list_of_models_can_run_nowhere(tmp_path):
    text = '[hosts.h1]\nallow_models = ["mlp"]\n\n' + GBT + 'allowed_hosts = ["h1"]\n'
    assert only_problem(tmp_path, text).field == "jobs[0].allowed_hosts"


def test_a_job_allowed_on_a_host_that_accepts_it_routes_to_a_constraint_queue(tmp_path):
    m = load(
        write(tmp_path, '[hosts.h1]\ndeny_models = ["mlp"]\n\n' + GBT + 'allowed_hosts = ["h1"]\n')
    )
    r = route(m.jobs[0], m.tiers, m.hosts)
    assert r.tier == "cpu" and r.queue.startswith("cpu.") and r.constraint.admits("h1")


@pytest.mark.parametrize("header, name", [('[tiers."gpu.big"]', "gpu.big"), ("[tiers.GPU]", "GPU")])
def test_a_tier_name_that_is_not_a_usable_queue_name_is_rejected_at_its_header(
    tmp_path, header, name
):
    p = only_problem(tmp_path, f"[tiers.cpu]\nmin_cores = 1\n{header}\nmin_cores = 2\n" + GBT)
    assert (p.line, p.field) == (3, f"tiers.{name}")
    assert p.message == f"tier name {name!r} is not a usable queue name"
    assert p.fix == "use lowercase letters, digits, '-' and '_' (no dots)"


def test_a_tier_with_a_vram_floor_but_no_cuda_is_rejected(tmp_path):
    p = only_problem(tmp_path, "[tiers.cpu]\nmin_cores = 1\n[tiers.gpu]\nmin_vram_gib = 8\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (
        4,
        "tiers.gpu.min_vram_gib",
        "a VRAM floor needs require_cuda = true",
        "add require_cuda = true to this tier",
    )


@pytest.mark.parametrize(
    "line, field, message, fix",
    [
        ("min_core = 1", "tiers.cpu.min_core", "unknown key", "did you mean 'min_cores'?"),
        (
            "min_ram_gib = -1",
            "tiers.cpu.min_ram_gib",
            "must be >= 0, got -1",
            "use 0 or a positive number",
        ),
        (
            'require_cuda = "no"',
            "tiers.cpu.require_cuda",
            "must be true or false, got 'no'",
            "write it as true or false",
        ),
    ],
)
def test_a_bad_tier_key_is_reported_at_its_line(tmp_path, line, field, message, fix):
    p = only_problem(tmp_path, f"[tiers.cpu]\n{line}\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (2, field, message, fix)


def test_a_broken_tier_is_one_problem_not_one_more_per_unroutable_job(tmp_path):
    found = problems(
        tmp_path, '[tiers.gpu]\nrequire_cuda = "yes"\n' + GBT + "require_cuda = true\n"
    )
    assert [p.field for p in found] == ["tiers.gpu.require_cuda"]


def test_a_tier_that_is_not_a_table_is_rejected(tmp_path):
    p = only_problem(tmp_path, "[tiers]\ncpu = 3\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (
        2,
        "tiers.cpu",
        "must be a table",
        "write it as [tiers.cpu]",
    )


def test_custom_tiers_replace_the_defaults_most_demanding_first(tmp_path):
    text = (
        """
    [tiers.small]
    min_ram_gib = 1
    [tiers.gpu]
    require_cuda = true
    min_vram_gib = 12
    [tiers.big]
    min_ram_gib = 64
    min_cores = 16
    """
        + GBT
        + "min_ram_gib = 32\n"
        + GBT.replace('"a"', '"b"')
        + "require_cuda = true\n"
    )
    m = load(write(tmp_path, text))
    assert [(t.name, t.floor) for t in m.tiers] == [
        ("gpu", Needs(require_cuda=True, min_vram_gib=12.0)),
        ("big", Needs(min_ram_gib=64.0, min_cores=16)),
        ("small", Needs(min_ram_gib=1.0)),
    ]
    assert [route(j, m.tiers, m.hosts).queue for j in m.jobs] == ["small.ram32", "gpu"]


def test_with_custom_tiers_a_default_tier_name_is_unknown_to_hosts(tmp_path):
    p = only_problem(tmp_path, '[tiers.small]\nmin_cores = 1\n[hosts.h1]\ntiers = ["cpu"]\n' + GBT)
    assert (p.line, p.field, p.message, p.fix) == (
        4,
        "hosts.h1.tiers",
        "unknown tier 'cpu'",
        "known keys: small",
    )


def test_without_a_tiers_table_the_default_tiers_apply(tmp_path):
    assert load(write(tmp_path, GBT)).tiers == DEFAULT_TIERS


def test_a_host_naming_an_unknown_tier_gets_the_closest_tier_suggested(tmp_path):
    p = only_problem(tmp_path, '[hosts.h1]\ncpu_cores = 4\ntiers = ["cpu", "cudaa"]\n' + GBT)
    assert (p.line, p.field, p.message, p.fix) == (
        3,
        "hosts.h1.tiers",
        "unknown tier 'cudaa'",
        "did you mean 'cuda'?",
    )


@pytest.mark.parametrize("key", ["allow_models", "deny_models"])
def test_a_host_naming_an_unknown_model_gets_the_closest_model_suggested(tmp_path, key):
    p = only_problem(tmp_path, f'[hosts.h1]\n{key} = ["gbt", "mlpp"]\n' + GBT)
    assert (p.line, p.field, p.message, p.fix) == (
        2,
        f"hosts.h1.{key}",
        "unknown model 'mlpp'",
        "did you mean 'mlp'?",
    )


def test_a_host_may_name_command_jobs_as_a_model(tmp_path):
    m = load(write(tmp_path, '[hosts.h1]\ndeny_models = ["command"]\n' + GBT))
    assert m.hosts["h1"].deny_models == ("command",)


def test_an_inline_cuda_device_without_vram_is_rejected_at_the_devices_line(tmp_path):
    text = (
        "[hosts.h1]\ncpu_cores = 8\n"
        'cuda_devices = [{ name = "a", vram_total_gib = 24 }, { name = "b" }]\n'
    ) + GBT
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.message) == (
        3,
        "hosts.h1.cuda_devices[1]",
        "each device needs vram_total_gib (a number)",
    )
    assert p.fix == 'write {name = "...", vram_total_gib = 24}'


def test_a_cuda_device_sub_table_without_vram_is_rejected_at_its_header(tmp_path):
    text = (
        """
    [hosts.h1]
    cpu_cores = 8
    [[hosts.h1.cuda_devices]]
    name = "a"
    vram_total_gib = 24
    [[hosts.h1.cuda_devices]]
    name = "b"
    vram_total_gib = "24"
    [hosts.h2]
    cpu_core = 2
    """
        + GBT
    )
    found = problems(tmp_path, text)
    assert [(p.field, p.line) for p in found] == [
        ("hosts.h1.cuda_devices[1]", 6),
        ("hosts.h2.cpu_core", 10),
    ]


def test_a_bad_host_key_is_reported_at_its_line(tmp_path):
    p = only_problem(tmp_path, "[hosts.h1]\ncpu_cores = 4\ncpu_core = 4\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (
        3,
        "hosts.h1.cpu_core",
        "unknown key",
        "did you mean 'cpu_cores'?",
    )


def test_a_host_that_is_not_a_table_is_rejected(tmp_path):
    p = only_problem(tmp_path, "[hosts]\nh1 = 3\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (
        2,
        "hosts.h1",
        "must be a table",
        "write it as [hosts.h1]",
    )


def test_a_host_policy_keeps_its_lists_and_declared_capability(tmp_path):
    text = (
        '[hosts.h1]\ntiers = ["cpu"]\nallow_models = ["gbt"]\ncpu_cores = 4\n'
        'cuda_devices = [{ name = "a", vram_total_gib = 8 }]\n' + GBT
    )
    assert load(write(tmp_path, text)).hosts == {
        "h1": HostPolicy(
            "h1",
            ("cpu",),
            ("gbt",),
            (),
            {"cpu_cores": 4, "cuda_devices": [{"name": "a", "vram_total_gib": 8}]},
        )
    }
