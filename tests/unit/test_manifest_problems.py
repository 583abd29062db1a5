"""Where a manifest's problems are reported: unreadable files, TOML syntax, the file, line
and field of each problem, and every independent mistake at once. Pure: manifests are
written to tmp_path, no broker, no store."""

import pytest

from core.errors import ManifestError
from fleet.manifests import load, loads
from tests.unit.manifest_cases import COMMAND, CPU_ONLY, GBT, jobs_of, only_problem, problems, write


def test_a_toml_syntax_error_is_one_problem_at_the_parsers_line(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = = "a"\nmodel = "gbt"\n')
    assert (p.line, p.field) == (2, "(syntax)")
    assert p.message.startswith("not valid TOML: Invalid value (at line 2")
    assert p.fix == "fix the TOML syntax at that line"


def test_a_missing_file_is_a_problem_naming_the_path(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(ManifestError) as e:
        load(path)
    (p,) = e.value.problems
    assert (p.file, p.line, p.field) == (str(path), None, "(file)")
    assert p.message == "cannot read: No such file or directory"
    assert p.fix == "check the path"


def test_a_directory_given_as_the_manifest_is_an_unreadable_file(tmp_path):
    with pytest.raises(ManifestError) as e:
        load(tmp_path)
    (p,) = e.value.problems
    assert (p.file, p.field, p.message) == (str(tmp_path), "(file)", "cannot read: Is a directory")


def test_a_file_that_is_not_utf8_is_a_problem_not_a_traceback(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[[jobs]]\nname = "caf\xe9"\n')
    with pytest.raises(ManifestError) as e:
        load(path)
    (p,) = e.value.problems
    assert (p.file, p.line, p.field) == (str(path), None, "(file)")
    assert p.message.startswith("not UTF-8 text: ")
    assert p.fix == "save the file as UTF-8"


def test_an_empty_manifest_has_no_jobs(tmp_path):
    p = only_problem(tmp_path, "")
    assert (p.field, p.message, p.fix) == (
        "jobs",
        "the manifest has no jobs",
        "add at least one [[jobs]] table",
    )


def test_an_empty_jobs_list_is_a_manifest_with_no_jobs(tmp_path):
    p = only_problem(tmp_path, "jobs = []\n")
    assert (p.line, p.field, p.message) == (1, "jobs", "the manifest has no jobs")


def test_an_unknown_top_level_key_suggests_the_closest_one_and_is_reported_at_its_line(tmp_path):
    found = problems(tmp_path, '# comment\n[[job]]\nname = "a"\n')
    assert [(p.field, p.line, p.message, p.fix) for p in found] == [
        ("job", 2, "unknown key", "did you mean 'jobs'?"),
        ("jobs", None, "the manifest has no jobs", "add at least one [[jobs]] table"),
    ]


@pytest.mark.parametrize(
    "text, field, message",
    [
        ("tiers = 3\n" + GBT, "tiers", "must be a table, got 3"),
        ("hosts = [1]\n" + GBT, "hosts", "must be a table, got [1]"),
        ("jobs = 3\n", "jobs", "must be a list of tables, got 3"),
    ],
)
def test_a_top_level_key_of_the_wrong_type_names_the_expected_kind(tmp_path, text, field, message):
    p = problems(tmp_path, text)[0]
    assert (p.field, p.line, p.message) == (field, 1, message)


def test_a_single_jobs_table_is_told_to_use_double_brackets(tmp_path):
    p = only_problem(tmp_path, '[jobs]\nname = "a"\ncommand = ["x"]\n')
    assert (p.line, p.field, p.message, p.fix) == (
        1,
        "jobs",
        "is a single [jobs] table, not a list of jobs",
        "use [[jobs]] (double brackets) for each job",
    )


LOCATED = """
[tiers.cpu]
min_core = 1

[hosts.h1]
cpu_core = 4

[[jobs]]
name = "first"
model = "gbt"
data = "d.csv"
prority = 3

[[jobs]]
name = "second"
model = "gbt"
data = "d.csv"
hyper = { max_depth = 4, lr = 0.1 }

[[jobs]]
name = "third"
model = "mlp"
data = "d.csv"
[jobs.hyper]
epochs = 5
learning_rate = 20

[[jobs]]
name = "fourth"
model = "gbt"
data = "d.csv"
[jobs.sweep]
seed = [0, 1]
max_depth = 0.5
"""


def test_every_problem_has_the_file_the_line_and_the_field_path(tmp_path):
    found = problems(tmp_path, LOCATED)
    assert [(p.field, p.line) for p in found] == [
        ("tiers.cpu.min_core", 2),
        ("hosts.h1.cpu_core", 5),
        ("jobs[0].prority", 11),
        ("jobs[1].hyper.lr", 17),
        ("jobs[2].hyper.learning_rate", 25),
        ("jobs[3].sweep.max_depth", 33),
    ]
    assert found[4].message == "20 is out of range (0, 10]"
    assert str(found[4]) == (
        f"{tmp_path / 'manifest.toml'}:25: jobs[2].hyper.learning_rate: "
        "20 is out of range (0, 10]; fix: use a value in (0, 10]"
    )


def test_problems_in_the_second_and_third_job_entries_are_at_their_own_headers(tmp_path):
    text = GBT + (
        '\n[[jobs]]\nmodel = "gbt"\ndata = "d.csv"\n[jobs.sweep]\nseed = [1]\n'
        "\n[[jobs]]\ncommand = []\n"
    )
    found = problems(tmp_path, text)
    assert [(p.field, p.line, p.message) for p in found] == [
        ("jobs[1]", 6, "a job needs a name"),
        ("jobs[2]", 12, "a job needs a name"),
        ("jobs[2].command", 13, "command is empty"),
    ]


def test_comments_and_multi_line_arrays_do_not_shift_lines(tmp_path):
    text = """
    # header comment
    [[jobs]]  # the first
    name = "a"
    command = [
      "python",
      "train.py",
    ]
    artifacts = ["out/*"]
    timeout_s = 0  # "quoted" comment
    """
    p = only_problem(tmp_path, text)
    assert (p.field, p.line) == ("jobs[0].timeout_s", 9)


def test_all_independent_mistakes_are_reported_at_once(tmp_path):
    text = (
        GBT
        + "priority = 12\n"
        + GBT.replace('"a"', '"b"')
        + "hyper = { lr = 0.1 }\n"
        + COMMAND.replace('"a"', '"c"')
        + "max_attempts = 0\n"
    )
    with pytest.raises(ManifestError) as e:
        load(write(tmp_path, text))
    assert [p.field for p in e.value.problems] == [
        "jobs[0].priority",
        "jobs[1].hyper.lr",
        "jobs[2].max_attempts",
    ]
    assert str(e.value).startswith("3 problem(s) in manifest:\n")


def test_an_unroutable_job_is_reported_even_when_it_has_other_problems(tmp_path):
    found = problems(
        tmp_path, CPU_ONLY + GBT + "priority = 10\nrequire_cuda = true\nmin_vram_gib = 80\n"
    )
    assert [(p.line, p.field) for p in found] == [(4, "jobs[0]"), (8, "jobs[0].priority")]
    assert found[0].message == "job 'a' needs CUDA, min_vram_gib=80 and no tier guarantees it"


def test_a_job_that_can_run_on_no_host_is_reported_even_when_it_has_other_problems(tmp_path):
    text = (
        '[hosts.h1]\ndeny_models = ["gbt"]\n\n'
        + GBT
        + 'allowed_hosts = ["h1"]\nhyper = { lr = 0.1 }\n'
    )
    found = problems(tmp_path, text)
    assert [p.field for p in found] == ["jobs[0].allowed_hosts", "jobs[0].hyper.lr"]


def test_a_mistyped_need_skips_the_routing_check_rather_than_guess(tmp_path):
    p = only_problem(tmp_path, GBT + 'require_cuda = "yes"\nmin_cores = 64\n')
    assert p.field == "jobs[0].require_cuda"


def test_duplicate_names_and_ids_are_reported_even_when_the_jobs_have_other_problems(tmp_path):
    text = GBT + "priority = 10\n" + GBT + "seed = 1\ntimeout_s = 0\n" + GBT.replace('"a"', '"b"')
    found = problems(tmp_path, text)
    assert [(p.line, p.field) for p in found] == [
        (5, "jobs[0].priority"),
        (8, "jobs[1].name"),
        (12, "jobs[1].timeout_s"),
        (14, "jobs[2]"),
    ]
    assert (
        found[3].message
        == "job 'b' has the same content as 'a' (same job ID), so only one of them would run"
    )


def test_a_job_whose_content_has_a_problem_is_not_compared_by_id(tmp_path):
    # with the typo, b's hyper would be left out and b would look like a copy of a
    found = problems(tmp_path, GBT + GBT.replace('"a"', '"b"') + "hyperr = { max_depth = 3 }\n")
    assert [p.field for p in found] == ["jobs[1].hyperr"]


def test_a_job_remembers_the_line_of_its_table(tmp_path):
    jobs = jobs_of(tmp_path, GBT + "\n" + GBT.replace('"a"', '"b"') + "seed = 1\n")
    assert [j.line for j in jobs] == [1, 7]


def test_a_hyper_typo_is_reported_even_when_the_same_job_has_other_problems(tmp_path):
    found = problems(
        tmp_path,
        '[[jobs]]\nname = "a"\nmodel = "gbt"\ndata = "d.csv"\nhyper = { lr = 0.1 }\nprority = 3\n',
    )
    assert [(p.line, p.field) for p in found] == [(5, "jobs[0].hyper.lr"), (6, "jobs[0].prority")]
    assert "learning_rate" in found[0].fix and "'priority'" in found[1].fix


def test_a_mistyped_require_cuda_is_reported_once_not_also_as_a_vram_need_without_it():
    with pytest.raises(ManifestError) as e:
        loads(
            '[[jobs]]\nname = "x"\ncommand = ["true"]\nrequire_cuda = "yes"\nmin_vram_gib = 8\n',
            "m.toml",
        )
    assert [p.field for p in e.value.problems] == ["jobs[0].require_cuda"]
