"""One job table's rules (a name, one of model or command, ranges, CUDA flags, data URIs,
artifacts globs), unique names and contents, and what a job ID covers."""

import pytest

from manifest.schema import Needs
from tests.unit.manifest_cases import COMMAND, GBT, job_of, jobs_of, only_problem


def test_a_job_without_a_name_is_reported_at_its_table(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nmodel = "gbt"\ndata = "d.csv"\n')
    assert (p.line, p.field, p.message) == (1, "jobs[0]", "a job needs a name")
    assert p.fix == 'add name = "..." (unique in the manifest)'


@pytest.mark.parametrize("name", ['""', '"  "'])
def test_an_empty_job_name_is_rejected(tmp_path, name):
    p = only_problem(tmp_path, COMMAND.replace('"a"', name))
    assert (p.line, p.field, p.message, p.fix) == (
        2,
        "jobs[0].name",
        "a job name cannot be empty",
        "write a name, unique in the manifest",
    )


def test_a_job_with_both_model_and_command_must_pick_one(tmp_path):
    p = only_problem(tmp_path, GBT + 'command = ["python", "x.py"]\n')
    assert (p.line, p.field, p.message) == (
        3,
        "jobs[0].model",
        "a job needs exactly one of model or command",
    )
    assert p.fix == "set model to one of ['gbt', 'mlp'] or command to an argv list"


def test_a_job_with_neither_model_nor_command_must_pick_one(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\n')
    assert (p.line, p.field, p.message) == (
        1,
        "jobs[0].model",
        "a job needs exactly one of model or command",
    )


def test_an_unknown_model_suggests_the_closest_trainer(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\nmodel = "gbtt"\ndata = "d.csv"\n')
    assert (p.line, p.field, p.message, p.fix) == (
        3,
        "jobs[0].model",
        "unknown model 'gbtt'",
        "did you mean 'gbt'?",
    )


def test_an_empty_command_is_rejected(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\ncommand = []\n')
    assert (p.line, p.field, p.message) == (3, "jobs[0].command", "command is empty")
    assert p.fix == 'write an argv list, e.g. ["python", "train.py"]'


def test_artifacts_on_a_model_job_are_rejected(tmp_path):
    p = only_problem(tmp_path, GBT + 'artifacts = ["out/*"]\n')
    assert (p.line, p.field, p.message) == (
        5,
        "jobs[0].artifacts",
        "artifacts globs are for command jobs",
    )
    assert p.fix == "remove it: built-in trainers bundle their own outputs"


def test_a_model_job_without_data_is_rejected(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\nmodel = "mlp"\n')
    assert (p.line, p.field, p.message) == (1, "jobs[0].data", "model 'mlp' needs data")
    assert p.fix == "set data to a CSV/Parquet path or s3:// URI"


@pytest.mark.parametrize("priority", [-1, 10])
def test_a_priority_outside_0_to_9_is_rejected(tmp_path, priority):
    p = only_problem(tmp_path, GBT + f"priority = {priority}\n")
    assert (p.line, p.field, p.message) == (5, "jobs[0].priority", f"must be 0..9, got {priority}")
    assert p.fix == "use 0 (lowest) to 9 (most urgent)"


@pytest.mark.parametrize("priority", [0, 9])
def test_priorities_0_and_9_are_accepted(tmp_path, priority):
    assert job_of(tmp_path, GBT + f"priority = {priority}\n").priority == priority


@pytest.mark.parametrize("key", ["min_ram_gib", "min_cores", "prefer_cuda_grace_s"])
def test_a_negative_resource_is_rejected(tmp_path, key):
    p = only_problem(tmp_path, GBT + f"{key} = -2\n")
    assert (p.line, p.field, p.message, p.fix) == (
        5,
        f"jobs[0].{key}",
        "must be >= 0, got -2",
        "use 0 or a positive number",
    )


def test_a_negative_vram_need_is_rejected(tmp_path):
    p = only_problem(tmp_path, GBT + "require_cuda = true\nmin_vram_gib = -1\n")
    assert (p.line, p.field, p.message) == (6, "jobs[0].min_vram_gib", "must be >= 0, got -1")


@pytest.mark.parametrize("timeout", ["0", "-5", "0.0"])
def test_a_timeout_that_is_not_positive_is_rejected(tmp_path, timeout):
    p = only_problem(tmp_path, GBT + f"timeout_s = {timeout}\n")
    assert (p.line, p.field, p.message, p.fix) == (
        5,
        "jobs[0].timeout_s",
        "must be > 0",
        "leave it out for no limit",
    )


def test_max_attempts_below_one_is_rejected(tmp_path):
    p = only_problem(tmp_path, GBT + "max_attempts = 0\n")
    assert (p.line, p.field, p.message, p.fix) == (
        5,
        "jobs[0].max_attempts",
        "must be >= 1",
        "use 1 for a single try",
    )


def test_require_cuda_with_prefer_cuda_is_rejected_at_prefer_cuda(tmp_path):
    p = only_problem(tmp_path, GBT + "require_cuda = true\nprefer_cuda = true\n")
    assert (p.line, p.field, p.message) == (
        6,
        "jobs[0].prefer_cuda",
        "prefer_cuda with require_cuda has no effect",
    )


def test_a_vram_need_alone_implies_cuda_and_is_the_same_job_as_one_that_says_so(tmp_path):
    implied = job_of(tmp_path, GBT + "min_vram_gib = 8\n")
    said = job_of(tmp_path / "said", GBT + "require_cuda = true\nmin_vram_gib = 8\n")
    assert implied.needs == Needs(require_cuda=True, min_vram_gib=8.0)
    assert implied.job_id == said.job_id


def test_gpus_alone_implies_cuda(tmp_path):
    assert job_of(tmp_path, COMMAND + "gpus = 2\n").needs.require_cuda


def test_a_job_may_name_its_owner(tmp_path):
    jobs = jobs_of(
        tmp_path, COMMAND + 'owner = "alice@lab3"\n' + COMMAND.replace('"a"', '"b"') + "seed = 1\n"
    )
    assert [j.owner for j in jobs] == ["alice@lab3", None]
    assert jobs[0].to_dict()["owner"] == "alice@lab3" and "owner" not in jobs[1].to_dict()


def test_the_owner_is_not_part_of_a_jobs_id(tmp_path):
    assert (
        job_of(tmp_path, COMMAND + 'owner = "alice"\n').job_id
        == job_of(tmp_path / "b", COMMAND + 'owner = "bob"\n').job_id
    )


def test_a_bad_owner_is_reported_at_its_line_with_the_rule(tmp_path):
    p = only_problem(tmp_path, COMMAND + 'owner = "alice smith"\n')
    assert (p.line, p.field, p.message) == (
        4,
        "jobs[0].owner",
        "'alice smith' is not an owner's name",
    )
    assert "letters, digits and . _ @ + -" in p.fix


def test_a_vram_need_with_prefer_cuda_is_accepted(tmp_path):
    job = job_of(tmp_path, GBT + "prefer_cuda = true\nmin_vram_gib = 8\n")
    assert job.prefer_cuda and job.needs == Needs(min_vram_gib=8.0)


@pytest.mark.parametrize(
    "uri", ["https://example.com/d.csv", "gs://bucket/d.csv", "file:///tmp/d.csv"]
)
def test_a_data_uri_with_an_unsupported_scheme_is_rejected(tmp_path, uri):
    p = only_problem(tmp_path, f'[[jobs]]\nname = "a"\nmodel = "gbt"\ndata = "{uri}"\n')
    assert (p.line, p.field, p.message, p.fix) == (
        4,
        "jobs[0].data",
        f"unsupported data URI {uri!r}",
        "use a local path or s3://bucket/key",
    )


def test_a_host_both_allowed_and_denied_is_rejected(tmp_path):
    p = only_problem(tmp_path, GBT + 'allowed_hosts = ["h1", "h2"]\ndenied_hosts = ["h2"]\n')
    assert (p.line, p.field, p.message) == (
        6,
        "jobs[0].denied_hosts",
        "hosts both allowed and denied: ['h2']",
    )
    assert p.fix == "list each host once"


def test_two_jobs_with_one_name_are_reported_at_the_second_name(tmp_path):
    text = GBT + "seed = 1\n" + GBT + "seed = 2\n"
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.message, p.fix) == (
        8,
        "jobs[1].name",
        "duplicate job name 'a' (first at jobs[0])",
        "give each job a unique name",
    )


def test_a_sweep_name_that_collides_with_another_job_is_a_duplicate(tmp_path):
    text = (
        '[[jobs]]\nname = "a[seed=1]"\ncommand = ["x"]\nseed = 7\n'
        + COMMAND
        + "sweep = { seed = [0, 1] }\n"
    )
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.message) == (
        7,
        "jobs[1].name",
        "duplicate job name 'a[seed=1]' (first at jobs[0])",
    )


def test_two_jobs_with_the_same_content_are_reported_at_the_second(tmp_path):
    p = only_problem(tmp_path, GBT + GBT.replace('"a"', '"b"'))
    assert (p.line, p.field) == (6, "jobs[1]")
    assert (
        p.message
        == "job 'b' has the same content as 'a' (same job ID), so only one of them would run"
    )


def test_a_sweep_listing_a_value_twice_makes_a_duplicate_name(tmp_path):
    p = only_problem(tmp_path, GBT + "sweep = { seed = [1, 1] }\n")
    assert (p.field, p.message) == (
        "jobs[0].name",
        "duplicate job name 'a[seed=1]' (first at jobs[0])",
    )


def test_a_job_id_is_stable_across_runs(tmp_path):
    text = '[[jobs]]\nname = "a"\ncommand = ["python", "t.py"]\ndata = "d.csv"\nseed = 3\n'
    first, second = job_of(tmp_path, text, "one.toml"), job_of(tmp_path, text, "two.toml")
    assert first.job_id == second.job_id
    # pinned: a change here re-runs every job ever published; bump manifest.ids.ID_VERSION if meant
    assert first.job_id == "b74976022c4032f0d00a8647973eb8dbd5050280ce344226c2320dd8afa6d078"


@pytest.mark.parametrize(
    "change",
    [
        'name = "renamed"',
        "priority = 9",
        'allowed_hosts = ["h1"]',
        'denied_hosts = ["h2"]',
        "timeout_s = 60",
        "max_attempts = 3",
        "prefer_cuda_grace_s = 5",
    ],
)
def test_a_job_id_ignores_scheduling_changes(tmp_path, change):
    base = job_of(tmp_path, GBT, "base.toml")
    key = change.split(" =")[0]
    text = GBT.replace('name = "a"', change) if key == "name" else GBT + change + "\n"
    assert job_of(tmp_path, text, "changed.toml").job_id == base.job_id


@pytest.mark.parametrize(
    "change",
    [
        "hyper = { max_depth = 3 }",
        "seed = 1",
        'data = "other.csv"',
        "min_ram_gib = 1",
        "min_cores = 1",
        "require_cuda = true",
    ],
)
def test_a_job_id_changes_with_what_changes_the_result(tmp_path, change):
    base = job_of(tmp_path, GBT, "base.toml")
    key = change.split(" =")[0]
    text = GBT.replace('data = "d.csv"', change) if key == "data" else GBT + change + "\n"
    assert job_of(tmp_path, text, "changed.toml").job_id != base.job_id


def test_a_job_id_changes_with_the_model(tmp_path):
    assert (
        job_of(tmp_path, GBT, "gbt.toml").job_id
        != job_of(tmp_path, GBT.replace('"gbt"', '"mlp"'), "mlp.toml").job_id
    )


def test_a_job_id_changes_with_the_command_and_its_artifacts(tmp_path):
    base = job_of(tmp_path, COMMAND, "base.toml").job_id
    other = job_of(tmp_path, COMMAND.replace("train.py", "eval.py"), "other.toml").job_id
    with_artifacts = job_of(tmp_path, COMMAND + 'artifacts = ["out/*"]\n', "art.toml").job_id
    assert len({base, other, with_artifacts}) == 3


def test_the_same_data_bytes_in_another_directory_give_the_same_job_id(tmp_path):
    here = job_of(tmp_path / "clone-1", GBT, "m.toml")
    there = job_of(tmp_path / "clone-2" / "deeper", GBT, "m.toml")
    assert here.job_id == there.job_id and here.data == there.data


def test_one_edited_byte_of_the_data_gives_a_new_job_id(tmp_path):
    before = job_of(tmp_path, GBT, "m.toml")
    data = tmp_path / "d.csv"
    data.write_bytes(data.read_bytes().replace(b"2,1", b"2,0"))
    after = job_of(tmp_path, GBT, "m.toml")
    assert after.job_id != before.job_id and after.data != before.data


def test_a_hyper_equal_to_its_default_gives_the_same_id_as_leaving_it_out(tmp_path):
    implicit = job_of(tmp_path, GBT, "implicit.toml")
    explicit = job_of(
        tmp_path, GBT + 'hyper = { max_depth = 6, objective = "auto" }\n', "explicit.toml"
    )
    assert explicit.job_id == implicit.job_id
    assert explicit.hyper == implicit.hyper
    assert implicit.hyper["max_depth"] == 6 and implicit.hyper["n_estimators"] == 200


def test_an_int_for_a_float_hyper_gives_the_same_id_as_the_float(tmp_path):
    as_int = job_of(tmp_path, GBT + "hyper = { learning_rate = 1 }\n", "int.toml")
    as_float = job_of(tmp_path, GBT + "hyper = { learning_rate = 1.0 }\n", "float.toml")
    assert as_int.job_id == as_float.job_id
    assert type(as_int.hyper["learning_rate"]) is float


def test_a_sweep_point_has_the_id_of_the_same_job_written_out(tmp_path):
    swept = jobs_of(tmp_path, GBT + "sweep = { max_depth = [3, 4], seed = [2] }\n", "swept.toml")
    written = job_of(tmp_path, GBT + "seed = 2\nhyper = { max_depth = 4 }\n", "written.toml")
    assert swept[1].job_id == written.job_id


@pytest.mark.parametrize(
    "glob, message",
    [
        ("../*.marker", "artifacts glob '../*.marker' leaves the job's directory ('..')"),
        ("out/../../secret", "artifacts glob 'out/../../secret' leaves the job's directory ('..')"),
        (
            "/etc/*",
            "artifacts glob '/etc/*' is absolute: artifacts come from the job's directory only",
        ),
        ("~/x", "artifacts glob '~/x' is absolute: artifacts come from the job's directory only"),
    ],
)
def test_an_artifacts_glob_that_leaves_the_job_directory_is_an_error_with_its_line_and_fix(
    tmp_path, glob, message
):
    p = only_problem(tmp_path, COMMAND + f'artifacts = ["out/*.txt", "{glob}"]\n')
    assert (p.line, p.field, p.message) == (4, "jobs[0].artifacts", message)
    assert p.fix


@pytest.mark.parametrize("glob", ["out/*", "**/*.pt", "out/..hidden", "checkpoints/model.pt"])
def test_an_artifacts_glob_inside_the_job_directory_is_accepted(tmp_path, glob):
    assert job_of(tmp_path, COMMAND + f'artifacts = ["{glob}"]\n').artifacts == (glob,)
