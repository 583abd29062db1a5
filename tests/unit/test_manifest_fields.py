"""Field kinds: unknown keys get the closest known one, values of the wrong kind name the
kind expected, and TOML dates (which JSON cannot carry) are refused where they appear."""

import pytest

from tests.unit.manifest_cases import COMMAND, GBT, only_problem, write


def test_an_unknown_job_key_suggests_the_closest_known_key(tmp_path):
    p = only_problem(tmp_path, GBT + "prority = 3\n")
    assert (p.line, p.field, p.message, p.fix) == (
        5,
        "jobs[0].prority",
        "unknown key",
        "did you mean 'priority'?",
    )


@pytest.mark.parametrize(
    "key, value, fix",
    [
        ("cuda", "true", "did you mean 'require_cuda'?"),
        ("vram", "8", "did you mean 'min_vram_gib'?"),
        ("cpus", "4", "did you mean 'min_cores'?"),
        ("memory", "4", "did you mean 'min_ram_gib'?"),
    ],
)
def test_a_need_written_as_another_scheduler_names_it_suggests_fleets_name(
    tmp_path, key, value, fix
):
    p = only_problem(tmp_path, GBT + f"{key} = {value}\n")
    assert (p.field, p.message, p.fix) == (f"jobs[0].{key}", "unknown key", fix)


def test_a_needs_table_says_needs_are_keys_of_the_job_not_a_spelling_of_seed(tmp_path):
    p = only_problem(tmp_path, GBT + "[jobs.needs]\ncuda = true\n")
    assert p.field == "jobs[0].needs" and "seed" not in p.fix
    assert (
        p.fix.startswith("a job's needs are keys of the job itself")
        and "directly under [[jobs]]" in p.fix
    )


def test_an_unknown_job_key_with_nothing_close_lists_the_known_keys(tmp_path):
    p = only_problem(tmp_path, GBT + "zzzz = 3\n")
    assert p.fix.startswith("known keys: after, allowed_hosts, artifacts, checkpoint, command,")


@pytest.mark.parametrize(
    "line, field, message, fix",
    [
        (
            'require_cuda = "yes"',
            "require_cuda",
            "must be true or false, got 'yes'",
            "write it as true or false",
        ),
        ("seed = 1.5", "seed", "must be an integer, got 1.5", "write it as an integer"),
        ("seed = true", "seed", "must be an integer, got True", "write it as an integer"),
        ("priority = 2.0", "priority", "must be an integer, got 2.0", "write it as an integer"),
        ('timeout_s = "10"', "timeout_s", "must be a number, got '10'", "write it as a number"),
        (
            "min_ram_gib = false",
            "min_ram_gib",
            "must be a number, got False",
            "write it as a number",
        ),
        (
            'allowed_hosts = "h1"',
            "allowed_hosts",
            "must be a list of strings, got 'h1'",
            "write it as a list of strings",
        ),
        (
            'denied_hosts = ["h1", 2]',
            "denied_hosts",
            "must be a list of strings, got ['h1', 2]",
            "write it as a list of strings",
        ),
        ("hyper = 3", "hyper", "must be a table, got 3", "write it as a table"),
        ("sweep = [1, 2]", "sweep", "must be a table, got [1, 2]", "write it as a table"),
    ],
)
def test_a_job_key_of_the_wrong_type_names_the_expected_kind(tmp_path, line, field, message, fix):
    p = only_problem(tmp_path, GBT + line + "\n")
    assert (p.line, p.field, p.message, p.fix) == (5, f"jobs[0].{field}", message, fix)


def test_a_string_where_a_command_list_belongs_is_one_problem_showing_the_argv_list(tmp_path):
    p = only_problem(
        tmp_path, '[[jobs]]\nname = "a"\ncommand = "python train.py --out \'my dir\'"\n'
    )
    assert (p.line, p.field) == (3, "jobs[0].command")
    assert p.message == "must be an argv list, got the string \"python train.py --out 'my dir'\""
    assert p.fix == 'write command = ["python", "train.py", "--out", "my dir"]'


def test_a_mistyped_model_is_not_also_a_missing_one(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\nmodel = 3\ndata = "d.csv"\n')
    assert (p.field, p.message) == ("jobs[0].model", "must be a string, got 3")


@pytest.mark.parametrize(
    "value, iso",
    [
        ("2024-01-01", "2024-01-01"),
        ("10:30:00", "10:30:00"),
        ("2024-01-01T10:30:00Z", "2024-01-01T10:30:00+00:00"),
        ("{ at = 2024-01-01 }", "2024-01-01"),
    ],
)
def test_a_date_or_time_in_a_command_jobs_hyper_is_a_problem_not_a_traceback(tmp_path, value, iso):
    p = only_problem(tmp_path, COMMAND + f"hyper = {{ when = {value} }}\n")
    assert (p.line, p.field) == (4, "jobs[0].hyper.when")
    assert (p.message, p.fix) == (
        f"TOML dates and times are not supported, got {iso}",
        f'use a string, e.g. "{iso}"',
    )


def test_a_date_in_a_sweep_is_a_problem_at_the_sweep_key(tmp_path):
    p = only_problem(tmp_path, COMMAND + "[jobs.sweep]\nseed = [1]\nwhen = [2024-01-01]\n")
    assert (p.line, p.field, p.fix) == (6, "jobs[0].sweep.when", 'use a string, e.g. "2024-01-01"')


def test_a_date_in_a_model_jobs_hyper_is_a_type_problem(tmp_path):
    p = only_problem(tmp_path, GBT + "hyper = { target = 2024-01-01 }\n")
    assert (p.field, p.message) == (
        "jobs[0].hyper.target",
        "must be str, got date datetime.date(2024, 1, 1)",
    )


def test_a_date_in_a_declared_cuda_device_is_a_problem(tmp_path):
    text = (
        '[hosts.h1]\ncuda_devices = [{ name = "a", vram_total_gib = 8, bought = 2024-01-01 }]\n'
        + GBT
    )
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.fix) == (
        2,
        "hosts.h1.cuda_devices[0]",
        'use a string, e.g. "2024-01-01"',
    )


def test_publishing_a_manifest_with_a_date_exits_2_without_a_broker(tmp_path, capsys):
    from fleet.cli import main

    assert main(["publish", str(write(tmp_path, COMMAND + "hyper = { when = 2024-01-01 }\n"))]) == 2
    assert "jobs[0].hyper.when: TOML dates and times are not supported" in capsys.readouterr().err
