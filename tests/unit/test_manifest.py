"""Manifest loading, by example: every problem with its file, line, field and fix; job IDs;
sweeps; data paths; tiers. Pure: manifests are written to tmp_path, no broker, no store."""
from pathlib import Path
from textwrap import dedent

import pytest

import hashlib

from artifacts.identity import DataResolver
from core.errors import ManifestError
from manifest.loader import load
from manifest.schema import HostPolicy, Needs
from routing.tiers import DEFAULT_TIERS, route

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "manifest.toml"

# One valid model job; tests append keys to it. Its lines: [[jobs]] 1, name 2, model 3, data 4.
GBT = """
[[jobs]]
name = "a"
model = "gbt"
data = "d.csv"
"""
COMMAND = """
[[jobs]]
name = "a"
command = ["python", "train.py"]
"""


# the data files the job tables name, next to each manifest (a missing one is an error)
DATA_FILES = {"d.csv": "x,target\n1,0\n2,1\n", "other.csv": "x,target\n3,1\n4,0\n"}


def write(tmp_path: Path, text: str, name: str = "manifest.toml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dedent(text).lstrip("\n"))
    for data, content in DATA_FILES.items():
        if not (path.parent / data).exists():
            (path.parent / data).write_text(content)
    return path


def problems(tmp_path: Path, text: str) -> list:
    path = write(tmp_path, text)
    with pytest.raises(ManifestError) as e:
        load(path)
    for p in e.value.problems:
        assert p.file == str(path)
    return e.value.problems


def only_problem(tmp_path: Path, text: str):
    found = problems(tmp_path, text)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def jobs_of(tmp_path: Path, text: str, name: str = "manifest.toml"):
    return load(write(tmp_path, text, name)).jobs


def job_of(tmp_path: Path, text: str, name: str = "manifest.toml"):
    (job,) = jobs_of(tmp_path, text, name)
    return job


# --- file and syntax ----------------------------------------------------------------------

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
    assert (p.field, p.message, p.fix) == ("jobs", "the manifest has no jobs", "add at least one [[jobs]] table")


def test_an_empty_jobs_list_is_a_manifest_with_no_jobs(tmp_path):
    p = only_problem(tmp_path, "jobs = []\n")
    assert (p.line, p.field, p.message) == (1, "jobs", "the manifest has no jobs")


def test_an_unknown_top_level_key_suggests_the_closest_one_and_is_reported_at_its_line(tmp_path):
    found = problems(tmp_path, '# comment\n[[job]]\nname = "a"\n')
    assert [(p.field, p.line, p.message, p.fix) for p in found] == [
        ("job", 2, "unknown key", "did you mean 'jobs'?"),
        ("jobs", None, "the manifest has no jobs", "add at least one [[jobs]] table"),
    ]


@pytest.mark.parametrize("text, field, message", [
    ("tiers = 3\n" + GBT, "tiers", "must be a table, got 3"),
    ("hosts = [1]\n" + GBT, "hosts", "must be a table, got [1]"),
    ("jobs = 3\n", "jobs", "must be a list of tables, got 3"),
])
def test_a_top_level_key_of_the_wrong_type_names_the_expected_kind(tmp_path, text, field, message):
    p = problems(tmp_path, text)[0]
    assert (p.field, p.line, p.message) == (field, 1, message)


def test_a_single_jobs_table_is_told_to_use_double_brackets(tmp_path):
    p = only_problem(tmp_path, '[jobs]\nname = "a"\ncommand = ["x"]\n')
    assert (p.line, p.field, p.message, p.fix) == (1, "jobs", "is a single [jobs] table, not a list of jobs",
                                                   "use [[jobs]] (double brackets) for each job")


# --- job keys -----------------------------------------------------------------------------

def test_an_unknown_job_key_suggests_the_closest_known_key(tmp_path):
    p = only_problem(tmp_path, GBT + "prority = 3\n")
    assert (p.line, p.field, p.message, p.fix) == (5, "jobs[0].prority", "unknown key", "did you mean 'priority'?")


def test_an_unknown_job_key_with_nothing_close_lists_the_known_keys(tmp_path):
    p = only_problem(tmp_path, GBT + "zzzz = 3\n")
    assert p.fix.startswith("known keys: allowed_hosts, artifacts, checkpoint, command, data,")


@pytest.mark.parametrize("line, field, message, fix", [
    ('require_cuda = "yes"', "require_cuda", "must be true or false, got 'yes'", "write it as true or false"),
    ("seed = 1.5", "seed", "must be an integer, got 1.5", "write it as an integer"),
    ("seed = true", "seed", "must be an integer, got True", "write it as an integer"),
    ("priority = 2.0", "priority", "must be an integer, got 2.0", "write it as an integer"),
    ('timeout_s = "10"', "timeout_s", "must be a number, got '10'", "write it as a number"),
    ("min_ram_gib = false", "min_ram_gib", "must be a number, got False", "write it as a number"),
    ('allowed_hosts = "h1"', "allowed_hosts", "must be a list of strings, got 'h1'", "write it as a list of strings"),
    ('denied_hosts = ["h1", 2]', "denied_hosts", "must be a list of strings, got ['h1', 2]",
     "write it as a list of strings"),
    ("hyper = 3", "hyper", "must be a table, got 3", "write it as a table"),
    ("sweep = [1, 2]", "sweep", "must be a table, got [1, 2]", "write it as a table"),
])
def test_a_job_key_of_the_wrong_type_names_the_expected_kind(tmp_path, line, field, message, fix):
    p = only_problem(tmp_path, GBT + line + "\n")
    assert (p.line, p.field, p.message, p.fix) == (5, f"jobs[0].{field}", message, fix)


def test_a_string_where_a_command_list_belongs_is_one_problem_showing_the_argv_list(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\ncommand = "python train.py --out \'my dir\'"\n')
    assert (p.line, p.field) == (3, "jobs[0].command")
    assert p.message == "must be an argv list, got the string \"python train.py --out 'my dir'\""
    assert p.fix == 'write command = ["python", "train.py", "--out", "my dir"]'


def test_a_mistyped_model_is_not_also_a_missing_one(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\nmodel = 3\ndata = "d.csv"\n')
    assert (p.field, p.message) == ("jobs[0].model", "must be a string, got 3")


def test_a_job_without_a_name_is_reported_at_its_table(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nmodel = "gbt"\ndata = "d.csv"\n')
    assert (p.line, p.field, p.message) == (1, "jobs[0]", "a job needs a name")
    assert p.fix == 'add name = "..." (unique in the manifest)'


@pytest.mark.parametrize("name", ['""', '"  "'])
def test_an_empty_job_name_is_rejected(tmp_path, name):
    p = only_problem(tmp_path, COMMAND.replace('"a"', name))
    assert (p.line, p.field, p.message, p.fix) == (2, "jobs[0].name", "a job name cannot be empty",
                                                   "write a name, unique in the manifest")


def test_a_job_with_both_model_and_command_must_pick_one(tmp_path):
    p = only_problem(tmp_path, GBT + 'command = ["python", "x.py"]\n')
    assert (p.line, p.field, p.message) == (3, "jobs[0].model", "a job needs exactly one of model or command")
    assert p.fix == "set model to one of ['gbt', 'mlp'] or command to an argv list"


def test_a_job_with_neither_model_nor_command_must_pick_one(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\n')
    assert (p.line, p.field, p.message) == (1, "jobs[0].model", "a job needs exactly one of model or command")


def test_an_unknown_model_suggests_the_closest_trainer(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\nmodel = "gbtt"\ndata = "d.csv"\n')
    assert (p.line, p.field, p.message, p.fix) == (3, "jobs[0].model", "unknown model 'gbtt'", "did you mean 'gbt'?")


def test_an_empty_command_is_rejected(tmp_path):
    p = only_problem(tmp_path, '[[jobs]]\nname = "a"\ncommand = []\n')
    assert (p.line, p.field, p.message) == (3, "jobs[0].command", "command is empty")
    assert p.fix == 'write an argv list, e.g. ["python", "train.py"]'


def test_artifacts_on_a_model_job_are_rejected(tmp_path):
    p = only_problem(tmp_path, GBT + 'artifacts = ["out/*"]\n')
    assert (p.line, p.field, p.message) == (5, "jobs[0].artifacts", "artifacts globs are for command jobs")
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
    assert (p.line, p.field, p.message, p.fix) == (5, f"jobs[0].{key}", "must be >= 0, got -2",
                                                   "use 0 or a positive number")


def test_a_negative_vram_need_is_rejected(tmp_path):
    p = only_problem(tmp_path, GBT + "require_cuda = true\nmin_vram_gib = -1\n")
    assert (p.line, p.field, p.message) == (6, "jobs[0].min_vram_gib", "must be >= 0, got -1")


@pytest.mark.parametrize("timeout", ["0", "-5", "0.0"])
def test_a_timeout_that_is_not_positive_is_rejected(tmp_path, timeout):
    p = only_problem(tmp_path, GBT + f"timeout_s = {timeout}\n")
    assert (p.line, p.field, p.message, p.fix) == (5, "jobs[0].timeout_s", "must be > 0", "leave it out for no limit")


def test_max_attempts_below_one_is_rejected(tmp_path):
    p = only_problem(tmp_path, GBT + "max_attempts = 0\n")
    assert (p.line, p.field, p.message, p.fix) == (5, "jobs[0].max_attempts", "must be >= 1",
                                                   "use 1 for a single try")


def test_require_cuda_with_prefer_cuda_is_rejected_at_prefer_cuda(tmp_path):
    p = only_problem(tmp_path, GBT + "require_cuda = true\nprefer_cuda = true\n")
    assert (p.line, p.field, p.message) == (6, "jobs[0].prefer_cuda", "prefer_cuda with require_cuda has no effect")


def test_a_vram_need_without_cuda_is_rejected(tmp_path):
    p = only_problem(tmp_path, GBT + "min_vram_gib = 8\n")
    assert (p.line, p.field, p.message) == (5, "jobs[0].min_vram_gib",
                                            "a VRAM need without require_cuda or prefer_cuda")
    assert p.fix == "add require_cuda = true (or prefer_cuda = true)"


def test_a_vram_need_with_prefer_cuda_is_accepted(tmp_path):
    job = job_of(tmp_path, GBT + "prefer_cuda = true\nmin_vram_gib = 8\n")
    assert job.prefer_cuda and job.needs == Needs(min_vram_gib=8.0)


@pytest.mark.parametrize("uri", ["https://example.com/d.csv", "gs://bucket/d.csv", "file:///tmp/d.csv"])
def test_a_data_uri_with_an_unsupported_scheme_is_rejected(tmp_path, uri):
    p = only_problem(tmp_path, f'[[jobs]]\nname = "a"\nmodel = "gbt"\ndata = "{uri}"\n')
    assert (p.line, p.field, p.message, p.fix) == (4, "jobs[0].data", f"unsupported data URI {uri!r}",
                                                   "use a local path or s3://bucket/key")


def test_a_host_both_allowed_and_denied_is_rejected(tmp_path):
    p = only_problem(tmp_path, GBT + 'allowed_hosts = ["h1", "h2"]\ndenied_hosts = ["h2"]\n')
    assert (p.line, p.field, p.message) == (6, "jobs[0].denied_hosts", "hosts both allowed and denied: ['h2']")
    assert p.fix == "list each host once"


# --- hyper, checked against the trainer schema -----------------------------------------------

@pytest.mark.parametrize("hyper, key, message, fix", [
    ("lr = 0.1", "lr", "unknown key for model 'gbt'", "did you mean 'learning_rate'?"),
    ("max_dept = 3", "max_dept", "unknown key for model 'gbt'", "did you mean 'max_depth'?"),
    ('learning_rate = "fast"', "learning_rate", "must be float, got str 'fast'", "use e.g. 0.1"),
    ("max_depth = 2.5", "max_depth", "must be int, got float 2.5", "use e.g. 6"),
    ("max_depth = true", "max_depth", "must be int, got bool True", "use e.g. 6"),
    ("learning_rate = 0", "learning_rate", "0 is out of range (0, 1]", "use a value in (0, 1]"),
    ("max_depth = 65", "max_depth", "65 is out of range [1, 64]", "use a value in [1, 64]"),
    ("learning_rate = nan", "learning_rate", "must be a finite number, got nan", "use e.g. 0.1"),
    ('objective = "hinge"', "objective",
     "'hinge' is not one of 'auto', 'binary:logistic', 'multi:softprob', 'reg:squarederror'",
     "use one of 'auto', 'binary:logistic', 'multi:softprob', 'reg:squarederror'"),
])
def test_a_bad_hyper_value_in_an_inline_table_is_reported_at_its_key(tmp_path, hyper, key, message, fix):
    p = only_problem(tmp_path, GBT + f"hyper = {{ n_estimators = 10, {hyper} }}\n")
    assert (p.line, p.field, p.message, p.fix) == (5, f"jobs[0].hyper.{key}", message, fix)


def test_a_bad_mlp_layer_list_is_reported_with_the_bad_part(tmp_path):
    text = '[[jobs]]\nname = "a"\nmodel = "mlp"\ndata = "d.csv"\nhyper = { hidden_sizes = "64,x" }\n'
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.message) == (5, "jobs[0].hyper.hidden_sizes", "layer width 'x' is not a whole number")


def test_a_bad_hyper_key_in_a_hyper_sub_table_is_reported_at_its_own_line(tmp_path):
    p = only_problem(tmp_path, GBT + "[jobs.hyper]\nmax_depth = 3\nlr = 0.1\n")
    assert (p.line, p.field, p.fix) == (7, "jobs[0].hyper.lr", "did you mean 'learning_rate'?")


def test_every_bad_hyper_key_of_a_job_is_reported(tmp_path):
    found = problems(tmp_path, GBT + "[jobs.hyper]\nlr = 0.1\nmax_depth = 0\n")
    assert [(p.field, p.line) for p in found] == [("jobs[0].hyper.lr", 6), ("jobs[0].hyper.max_depth", 7)]


@pytest.mark.parametrize("value, iso", [
    ("2024-01-01", "2024-01-01"), ("10:30:00", "10:30:00"),
    ("2024-01-01T10:30:00Z", "2024-01-01T10:30:00+00:00"), ('{ at = 2024-01-01 }', "2024-01-01"),
])
def test_a_date_or_time_in_a_command_jobs_hyper_is_a_problem_not_a_traceback(tmp_path, value, iso):
    p = only_problem(tmp_path, COMMAND + f"hyper = {{ when = {value} }}\n")
    assert (p.line, p.field) == (4, "jobs[0].hyper.when")
    assert (p.message, p.fix) == (f"TOML dates and times are not supported, got {iso}", f'use a string, e.g. "{iso}"')


def test_a_date_in_a_sweep_is_a_problem_at_the_sweep_key(tmp_path):
    p = only_problem(tmp_path, COMMAND + "[jobs.sweep]\nseed = [1]\nwhen = [2024-01-01]\n")
    assert (p.line, p.field, p.fix) == (6, "jobs[0].sweep.when", 'use a string, e.g. "2024-01-01"')


def test_a_date_in_a_model_jobs_hyper_is_a_type_problem(tmp_path):
    p = only_problem(tmp_path, GBT + "hyper = { target = 2024-01-01 }\n")
    assert (p.field, p.message) == ("jobs[0].hyper.target", "must be str, got date datetime.date(2024, 1, 1)")


def test_a_date_in_a_declared_cuda_device_is_a_problem(tmp_path):
    text = '[hosts.h1]\ncuda_devices = [{ name = "a", vram_total_gib = 8, bought = 2024-01-01 }]\n' + GBT
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.fix) == (2, "hosts.h1.cuda_devices[0]", 'use a string, e.g. "2024-01-01"')


def test_publishing_a_manifest_with_a_date_exits_2_without_a_broker(tmp_path, capsys):
    from fleet.cli import main
    assert main(["publish", str(write(tmp_path, COMMAND + "hyper = { when = 2024-01-01 }\n"))]) == 2
    assert "jobs[0].hyper.when: TOML dates and times are not supported" in capsys.readouterr().err


def test_a_command_job_takes_any_hyper_unchecked(tmp_path):
    job = job_of(tmp_path, COMMAND + "hyper = { lr = 0.1, anything = \"goes\" }\n")
    assert job.hyper == {"lr": 0.1, "anything": "goes"}


# --- sweeps -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["3", "[]", '"3,4"'])
def test_a_sweep_value_that_is_not_a_non_empty_list_is_rejected(tmp_path, value):
    p = only_problem(tmp_path, GBT + f"[jobs.sweep]\nmax_depth = {value}\n")
    assert (p.line, p.field, p.message, p.fix) == (6, "jobs[0].sweep.max_depth", "a sweep value must be a non-empty list",
                                                   "write max_depth = [a, b, ...]")


@pytest.mark.parametrize("seeds", ["[0, 1.5]", '["0"]', "[true]"])
def test_a_seed_sweep_of_non_integers_is_rejected(tmp_path, seeds):
    p = only_problem(tmp_path, GBT + f"sweep = {{ seed = {seeds} }}\n")
    assert (p.line, p.field, p.message, p.fix) == (5, "jobs[0].sweep.seed", "seeds must be integers",
                                                   "write seed = [0, 1, 2]")


def test_a_key_in_both_hyper_and_sweep_is_rejected_at_the_sweep(tmp_path):
    p = only_problem(tmp_path, GBT + "hyper = { max_depth = 3 }\n[jobs.sweep]\nmax_depth = [4, 5]\n")
    assert (p.line, p.field, p.message, p.fix) == (7, "jobs[0].sweep.max_depth",
                                                   "max_depth is set in both hyper and sweep", "keep it in one place")


def test_a_bad_hyper_value_in_a_sweep_is_reported_at_the_sweep_key(tmp_path):
    p = only_problem(tmp_path, GBT + "[jobs.sweep]\nseed = [0, 1]\nlearning_rate = [0.1, 2.0]\n")
    assert (p.line, p.field, p.message) == (7, "jobs[0].sweep.learning_rate", "2.0 is out of range (0, 1]")


def test_every_bad_value_of_a_sweep_is_reported_once_at_its_line(tmp_path):
    text = ('[[jobs]]\nname = "a"\nmodel = "mlp"\ndata = "d.csv"\n'
            "[jobs.sweep]\nlearning_rate = [0.1, -1, 20]\nepochs = [0, 5]\n")
    found = problems(tmp_path, text)
    assert [(p.line, p.field, p.message) for p in found] == [
        (6, "jobs[0].sweep.learning_rate", "-1 is out of range (0, 10]"),
        (6, "jobs[0].sweep.learning_rate", "20 is out of range (0, 10]"),
        (7, "jobs[0].sweep.epochs", "0 is out of range [1, 10000]"),
    ]


def test_bad_sweep_values_are_reported_even_when_another_sweep_key_is_not_a_list(tmp_path):
    found = problems(tmp_path, GBT + "[jobs.sweep]\nseed = 3\nmax_depth = [0, 4]\n")
    assert [(p.line, p.field) for p in found] == [(6, "jobs[0].sweep.seed"), (7, "jobs[0].sweep.max_depth")]


def test_an_unknown_hyper_key_in_a_sweep_suggests_the_trainer_key(tmp_path):
    p = only_problem(tmp_path, GBT + "[jobs.sweep]\nlr = [0.1, 0.2]\n")
    assert (p.line, p.field, p.fix) == (6, "jobs[0].sweep.lr", "did you mean 'learning_rate'?")


def test_a_sweep_is_the_cross_product_of_its_lists_named_by_point(tmp_path):
    jobs = jobs_of(tmp_path, GBT + "[jobs.sweep]\nmax_depth = [3, 5]\nlearning_rate = [0.1, 0.2, 0.3]\n")
    assert [j.name for j in jobs] == [
        "a[learning_rate=0.1,max_depth=3]", "a[learning_rate=0.1,max_depth=5]",
        "a[learning_rate=0.2,max_depth=3]", "a[learning_rate=0.2,max_depth=5]",
        "a[learning_rate=0.3,max_depth=3]", "a[learning_rate=0.3,max_depth=5]",
    ]
    assert [(j.hyper["learning_rate"], j.hyper["max_depth"]) for j in jobs] == [
        (0.1, 3), (0.1, 5), (0.2, 3), (0.2, 5), (0.3, 3), (0.3, 5)]
    assert len({j.job_id for j in jobs}) == 6


def test_a_seed_sweep_gives_one_job_per_seed_with_the_same_hyper(tmp_path):
    jobs = jobs_of(tmp_path, GBT + "hyper = { max_depth = 4 }\nseed = 9\n[jobs.sweep]\nseed = [0, 1, 2]\n")
    assert [(j.name, j.seed) for j in jobs] == [("a[seed=0]", 0), ("a[seed=1]", 1), ("a[seed=2]", 2)]
    assert all(j.hyper == jobs[0].hyper and "seed" not in j.hyper for j in jobs)
    assert len({j.job_id for j in jobs}) == 3


def test_a_sweep_point_of_a_command_job_goes_into_its_hyper(tmp_path):
    jobs = jobs_of(tmp_path, COMMAND + "[jobs.sweep]\nwidth = [8, 16]\nseed = [1]\n")
    assert [(j.name, j.hyper, j.seed) for j in jobs] == [
        ("a[seed=1,width=8]", {"width": 8}, 1), ("a[seed=1,width=16]", {"width": 16}, 1)]


def test_a_sweep_over_a_number_and_the_same_digits_as_a_string_gives_two_names(tmp_path):
    jobs = jobs_of(tmp_path, COMMAND + 'sweep = { k = [1, "1", 1.0, true, "a,b"] }\n')
    assert [j.name for j in jobs] == ['a[k=1]', 'a[k="1"]', 'a[k=1.0]', 'a[k=True]', 'a[k="a,b"]']


# --- duplicates, routing, hosts of a job -------------------------------------------------------

def test_two_jobs_with_one_name_are_reported_at_the_second_name(tmp_path):
    text = GBT + "seed = 1\n" + GBT + "seed = 2\n"
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.message, p.fix) == (8, "jobs[1].name", "duplicate job name 'a' (first at jobs[0])",
                                                   "give each job a unique name")


def test_a_sweep_name_that_collides_with_another_job_is_a_duplicate(tmp_path):
    text = '[[jobs]]\nname = "a[seed=1]"\ncommand = ["x"]\nseed = 7\n' + COMMAND + "sweep = { seed = [0, 1] }\n"
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.message) == (7, "jobs[1].name", "duplicate job name 'a[seed=1]' (first at jobs[0])")


def test_two_jobs_with_the_same_content_are_reported_at_the_second(tmp_path):
    p = only_problem(tmp_path, GBT + GBT.replace('"a"', '"b"'))
    assert (p.line, p.field) == (6, "jobs[1]")
    assert p.message == "job 'b' has the same content as 'a' (same job ID), so only one of them would run"


def test_a_sweep_listing_a_value_twice_makes_a_duplicate_name(tmp_path):
    p = only_problem(tmp_path, GBT + "sweep = { seed = [1, 1] }\n")
    assert (p.field, p.message) == ("jobs[0].name", "duplicate job name 'a[seed=1]' (first at jobs[0])")


CPU_ONLY = "[tiers.small]\nmin_cores = 1\n"


def test_a_cuda_job_with_no_cuda_tier_is_named_with_a_tier_to_add(tmp_path):
    p = only_problem(tmp_path, CPU_ONLY + GBT + "require_cuda = true\nmin_vram_gib = 80\n")
    assert (p.line, p.field) == (4, "jobs[0]")
    assert p.message == "job 'a' needs CUDA, min_vram_gib=80 and no tier guarantees it"
    assert p.fix == ("add a tier whose floor covers it, e.g. [tiers.cuda-big] with "
                     "require_cuda = true, min_vram_gib = 80, or lower the job's needs")


@pytest.mark.parametrize("needs, queue", [
    ("require_cuda = true\nmin_vram_gib = 80\n", "cuda.vram80"),
    ("min_cores = 64\n", "cpu.cores64"),
])
def test_a_job_needing_more_than_every_floor_goes_to_a_need_queue_not_an_error(tmp_path, needs, queue):
    m = load(write(tmp_path, GBT + needs))
    assert route(m.jobs[0], m.tiers, m.hosts).queue == queue


def test_a_job_whose_only_allowed_host_refuses_its_model_can_run_nowhere(tmp_path):
    text = '[hosts.h1]\ndeny_models = ["gbt"]\n\n' + GBT + 'allowed_hosts = ["h1"]\n'
    p = only_problem(tmp_path, text)
    assert (p.line, p.field) == (9, "jobs[0].allowed_hosts")
    assert p.message == ("job 'a' can run on no host: every allowed host is denied "
                         "(by denied_hosts or a host's model policy)")
    assert p.fix == "allow a host that accepts it"


def test_a_job_allowed_on_a_host_outside_the_allow_list_of_models_can_run_nowhere(tmp_path):
    text = '[hosts.h1]\nallow_models = ["mlp"]\n\n' + GBT + 'allowed_hosts = ["h1"]\n'
    assert only_problem(tmp_path, text).field == "jobs[0].allowed_hosts"


def test_a_job_allowed_on_a_host_that_accepts_it_routes_to_a_constraint_queue(tmp_path):
    m = load(write(tmp_path, '[hosts.h1]\ndeny_models = ["mlp"]\n\n' + GBT + 'allowed_hosts = ["h1"]\n'))
    r = route(m.jobs[0], m.tiers, m.hosts)
    assert r.tier == "cpu" and r.queue.startswith("cpu.") and r.constraint.admits("h1")


# --- tiers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("header, name", [('[tiers."gpu.big"]', "gpu.big"), ("[tiers.GPU]", "GPU")])
def test_a_tier_name_that_is_not_a_usable_queue_name_is_rejected_at_its_header(tmp_path, header, name):
    p = only_problem(tmp_path, f"[tiers.cpu]\nmin_cores = 1\n{header}\nmin_cores = 2\n" + GBT)
    assert (p.line, p.field) == (3, f"tiers.{name}")
    assert p.message == f"tier name {name!r} is not a usable queue name"
    assert p.fix == "use lowercase letters, digits, '-' and '_' (no dots)"


def test_a_tier_with_a_vram_floor_but_no_cuda_is_rejected(tmp_path):
    p = only_problem(tmp_path, "[tiers.cpu]\nmin_cores = 1\n[tiers.gpu]\nmin_vram_gib = 8\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (4, "tiers.gpu.min_vram_gib", "a VRAM floor needs require_cuda = true",
                                                   "add require_cuda = true to this tier")


@pytest.mark.parametrize("line, field, message, fix", [
    ("min_core = 1", "tiers.cpu.min_core", "unknown key", "did you mean 'min_cores'?"),
    ("min_ram_gib = -1", "tiers.cpu.min_ram_gib", "must be >= 0, got -1", "use 0 or a positive number"),
    ('require_cuda = "no"', "tiers.cpu.require_cuda", "must be true or false, got 'no'", "write it as true or false"),
])
def test_a_bad_tier_key_is_reported_at_its_line(tmp_path, line, field, message, fix):
    p = only_problem(tmp_path, f"[tiers.cpu]\n{line}\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (2, field, message, fix)


def test_a_broken_tier_is_one_problem_not_one_more_per_unroutable_job(tmp_path):
    found = problems(tmp_path, "[tiers.gpu]\nrequire_cuda = \"yes\"\n" + GBT + "require_cuda = true\n")
    assert [p.field for p in found] == ["tiers.gpu.require_cuda"]


def test_a_tier_that_is_not_a_table_is_rejected(tmp_path):
    p = only_problem(tmp_path, "[tiers]\ncpu = 3\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (2, "tiers.cpu", "must be a table", "write it as [tiers.cpu]")


def test_custom_tiers_replace_the_defaults_most_demanding_first(tmp_path):
    text = """
    [tiers.small]
    min_ram_gib = 1
    [tiers.gpu]
    require_cuda = true
    min_vram_gib = 12
    [tiers.big]
    min_ram_gib = 64
    min_cores = 16
    """ + GBT + "min_ram_gib = 32\n" + GBT.replace('"a"', '"b"') + "require_cuda = true\n"
    m = load(write(tmp_path, text))
    assert [(t.name, t.floor) for t in m.tiers] == [
        ("gpu", Needs(require_cuda=True, min_vram_gib=12.0)),
        ("big", Needs(min_ram_gib=64.0, min_cores=16)),
        ("small", Needs(min_ram_gib=1.0)),
    ]
    assert [route(j, m.tiers, m.hosts).queue for j in m.jobs] == ["small.ram32", "gpu"]


def test_with_custom_tiers_a_default_tier_name_is_unknown_to_hosts(tmp_path):
    p = only_problem(tmp_path, '[tiers.small]\nmin_cores = 1\n[hosts.h1]\ntiers = ["cpu"]\n' + GBT)
    assert (p.line, p.field, p.message, p.fix) == (4, "hosts.h1.tiers", "unknown tier 'cpu'", "known keys: small")


def test_without_a_tiers_table_the_default_tiers_apply(tmp_path):
    assert load(write(tmp_path, GBT)).tiers == DEFAULT_TIERS


# --- hosts -------------------------------------------------------------------------------------

def test_a_host_naming_an_unknown_tier_gets_the_closest_tier_suggested(tmp_path):
    p = only_problem(tmp_path, '[hosts.h1]\ncpu_cores = 4\ntiers = ["cpu", "cudaa"]\n' + GBT)
    assert (p.line, p.field, p.message, p.fix) == (3, "hosts.h1.tiers", "unknown tier 'cudaa'", "did you mean 'cuda'?")


@pytest.mark.parametrize("key", ["allow_models", "deny_models"])
def test_a_host_naming_an_unknown_model_gets_the_closest_model_suggested(tmp_path, key):
    p = only_problem(tmp_path, f'[hosts.h1]\n{key} = ["gbt", "mlpp"]\n' + GBT)
    assert (p.line, p.field, p.message, p.fix) == (2, f"hosts.h1.{key}", "unknown model 'mlpp'", "did you mean 'mlp'?")


def test_a_host_may_name_command_jobs_as_a_model(tmp_path):
    m = load(write(tmp_path, '[hosts.h1]\ndeny_models = ["command"]\n' + GBT))
    assert m.hosts["h1"].deny_models == ("command",)


def test_an_inline_cuda_device_without_vram_is_rejected_at_the_devices_line(tmp_path):
    text = '[hosts.h1]\ncpu_cores = 8\ncuda_devices = [{ name = "a", vram_total_gib = 24 }, { name = "b" }]\n' + GBT
    p = only_problem(tmp_path, text)
    assert (p.line, p.field, p.message) == (3, "hosts.h1.cuda_devices[1]", "each device needs vram_total_gib (a number)")
    assert p.fix == 'write {name = "...", vram_total_gib = 24}'


def test_a_cuda_device_sub_table_without_vram_is_rejected_at_its_header(tmp_path):
    text = """
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
    """ + GBT
    found = problems(tmp_path, text)
    assert [(p.field, p.line) for p in found] == [("hosts.h1.cuda_devices[1]", 6), ("hosts.h2.cpu_core", 10)]


def test_a_bad_host_key_is_reported_at_its_line(tmp_path):
    p = only_problem(tmp_path, "[hosts.h1]\ncpu_cores = 4\ncpu_core = 4\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (3, "hosts.h1.cpu_core", "unknown key", "did you mean 'cpu_cores'?")


def test_a_host_that_is_not_a_table_is_rejected(tmp_path):
    p = only_problem(tmp_path, "[hosts]\nh1 = 3\n" + GBT)
    assert (p.line, p.field, p.message, p.fix) == (2, "hosts.h1", "must be a table", "write it as [hosts.h1]")


def test_a_host_policy_keeps_its_lists_and_declared_capability(tmp_path):
    text = ('[hosts.h1]\ntiers = ["cpu"]\nallow_models = ["gbt"]\ncpu_cores = 4\n'
            'cuda_devices = [{ name = "a", vram_total_gib = 8 }]\n' + GBT)
    assert load(write(tmp_path, text)).hosts == {"h1": HostPolicy(
        "h1", ("cpu",), ("gbt",), (), {"cpu_cores": 4, "cuda_devices": [{"name": "a", "vram_total_gib": 8}]})}


# --- where problems are reported -----------------------------------------------------------------

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
    assert str(found[4]) == (f"{tmp_path / 'manifest.toml'}:25: jobs[2].hyper.learning_rate: "
                             "20 is out of range (0, 10]; fix: use a value in (0, 10]")


def test_problems_in_the_second_and_third_job_entries_are_at_their_own_headers(tmp_path):
    text = GBT + "\n[[jobs]]\nmodel = \"gbt\"\ndata = \"d.csv\"\n[jobs.sweep]\nseed = [1]\n\n[[jobs]]\ncommand = []\n"
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
    text = GBT + "priority = 12\n" + GBT.replace('"a"', '"b"') + "hyper = { lr = 0.1 }\n" + COMMAND.replace(
        '"a"', '"c"') + "max_attempts = 0\n"
    with pytest.raises(ManifestError) as e:
        load(write(tmp_path, text))
    assert [p.field for p in e.value.problems] == ["jobs[0].priority", "jobs[1].hyper.lr", "jobs[2].max_attempts"]
    assert str(e.value).startswith("3 problem(s) in manifest:\n")


def test_an_unroutable_job_is_reported_even_when_it_has_other_problems(tmp_path):
    found = problems(tmp_path, CPU_ONLY + GBT + "priority = 10\nrequire_cuda = true\nmin_vram_gib = 80\n")
    assert [(p.line, p.field) for p in found] == [(4, "jobs[0]"), (8, "jobs[0].priority")]
    assert found[0].message == "job 'a' needs CUDA, min_vram_gib=80 and no tier guarantees it"


def test_a_job_that_can_run_on_no_host_is_reported_even_when_it_has_other_problems(tmp_path):
    text = '[hosts.h1]\ndeny_models = ["gbt"]\n\n' + GBT + 'allowed_hosts = ["h1"]\nhyper = { lr = 0.1 }\n'
    found = problems(tmp_path, text)
    assert [p.field for p in found] == ["jobs[0].allowed_hosts", "jobs[0].hyper.lr"]


def test_a_mistyped_need_skips_the_routing_check_rather_than_guess(tmp_path):
    p = only_problem(tmp_path, GBT + 'require_cuda = "yes"\nmin_cores = 64\n')
    assert p.field == "jobs[0].require_cuda"


def test_duplicate_names_and_ids_are_reported_even_when_the_jobs_have_other_problems(tmp_path):
    text = GBT + "priority = 10\n" + GBT + "seed = 1\ntimeout_s = 0\n" + GBT.replace('"a"', '"b"')
    found = problems(tmp_path, text)
    assert [(p.line, p.field) for p in found] == [
        (5, "jobs[0].priority"), (8, "jobs[1].name"), (12, "jobs[1].timeout_s"), (14, "jobs[2]")]
    assert found[3].message == "job 'b' has the same content as 'a' (same job ID), so only one of them would run"


def test_a_job_whose_content_has_a_problem_is_not_compared_by_id(tmp_path):
    # with the typo, b's hyper would be left out and b would look like a copy of a
    found = problems(tmp_path, GBT + GBT.replace('"a"', '"b"') + "hyperr = { max_depth = 3 }\n")
    assert [p.field for p in found] == ["jobs[1].hyperr"]


def test_a_job_remembers_the_line_of_its_table(tmp_path):
    jobs = jobs_of(tmp_path, GBT + "\n" + GBT.replace('"a"', '"b"') + "seed = 1\n")
    assert [j.line for j in jobs] == [1, 7]


# --- job IDs -------------------------------------------------------------------------------------

def test_a_job_id_is_stable_across_runs(tmp_path):
    text = '[[jobs]]\nname = "a"\ncommand = ["python", "t.py"]\ndata = "d.csv"\nseed = 3\n'
    first, second = job_of(tmp_path, text, "one.toml"), job_of(tmp_path, text, "two.toml")
    assert first.job_id == second.job_id
    # pinned: a change here re-runs every job ever published; bump manifest.ids.ID_VERSION if meant
    assert first.job_id == "b74976022c4032f0d00a8647973eb8dbd5050280ce344226c2320dd8afa6d078"


@pytest.mark.parametrize("change", [
    'name = "renamed"', "priority = 9", 'allowed_hosts = ["h1"]', 'denied_hosts = ["h2"]',
    "timeout_s = 60", "max_attempts = 3", "prefer_cuda_grace_s = 5",
])
def test_a_job_id_ignores_scheduling_changes(tmp_path, change):
    base = job_of(tmp_path, GBT, "base.toml")
    key = change.split(" =")[0]
    text = GBT.replace('name = "a"', change) if key == "name" else GBT + change + "\n"
    assert job_of(tmp_path, text, "changed.toml").job_id == base.job_id


@pytest.mark.parametrize("change", [
    "hyper = { max_depth = 3 }", "seed = 1", 'data = "other.csv"', "min_ram_gib = 1",
    "min_cores = 1", "require_cuda = true",
])
def test_a_job_id_changes_with_what_changes_the_result(tmp_path, change):
    base = job_of(tmp_path, GBT, "base.toml")
    key = change.split(" =")[0]
    text = GBT.replace('data = "d.csv"', change) if key == "data" else GBT + change + "\n"
    assert job_of(tmp_path, text, "changed.toml").job_id != base.job_id


def test_a_job_id_changes_with_the_model(tmp_path):
    assert job_of(tmp_path, GBT, "gbt.toml").job_id != job_of(tmp_path, GBT.replace('"gbt"', '"mlp"'), "mlp.toml").job_id


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
    explicit = job_of(tmp_path, GBT + 'hyper = { max_depth = 6, objective = "auto" }\n', "explicit.toml")
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


# --- data paths ----------------------------------------------------------------------------------

def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_relative_data_path_resolves_against_the_manifests_directory_and_is_pinned_to_its_bytes(
        tmp_path, monkeypatch):
    (tmp_path / "project" / "data").mkdir(parents=True)
    (tmp_path / "project" / "data" / "moons.csv").write_bytes(b"x,target\n1,0\n")
    (tmp_path / "up.csv").write_bytes(b"x,target\n2,1\n")
    monkeypatch.chdir(tmp_path)
    text = GBT.replace('"d.csv"', '"data/moons.csv"') + GBT.replace('"a"', '"b"').replace('"d.csv"', '"../up.csv"')
    m = load(write(tmp_path, text, "project/manifest.toml"))
    moons, up = sha(b"x,target\n1,0\n"), sha(b"x,target\n2,1\n")
    assert [j.data for j in m.jobs] == [f"store+sha256://{moons}/moons.csv", f"store+sha256://{up}/up.csv"]
    # where the bytes are on this disk stays with the publisher: only publish reads it
    assert {h: (s.path, s.kind, s.size) for h, s in m.data_sources.items()} == {
        moons: ((tmp_path / "project" / "data" / "moons.csv").resolve(), "file", 13),
        up: ((tmp_path / "up.csv").resolve(), "file", 13)}


def test_an_absolute_data_path_pins_the_same_bytes_as_a_relative_one(tmp_path):
    absolute = (tmp_path / "d.csv").resolve()
    relative = job_of(tmp_path, GBT, "rel.toml")
    assert job_of(tmp_path, GBT.replace('"d.csv"', f'"{absolute}"'), "abs.toml").data == relative.data


@pytest.mark.parametrize("identity, pinned", [
    ({"sha256": "ab" * 32}, "s3://bucket/sets/moons.csv#sha256=" + "ab" * 32),
    ({"etag": "e1", "size": 10, "version": None}, "s3://bucket/sets/moons.csv#etag=e1&size=10"),
    ({"etag": "e1", "size": 10, "version": "v7"}, "s3://bucket/sets/moons.csv#etag=e1&size=10&version=v7"),
])
def test_an_s3_uri_is_pinned_to_the_identity_the_store_gives(tmp_path, identity, pinned):
    m = load(write(tmp_path, GBT.replace('"d.csv"', '"s3://bucket/sets/moons.csv"')),
             DataResolver(s3=lambda uri: identity))
    assert m.jobs[0].data == pinned and m.data_sources == {}


def test_a_changed_s3_object_gives_a_new_job_id(tmp_path):
    path = write(tmp_path, GBT.replace('"d.csv"', '"s3://bucket/moons.csv"'))
    ids = {load(path, DataResolver(s3=lambda uri, e=etag: {"etag": e, "size": 3, "version": None})).jobs[0].job_id
           for etag in ("e1", "e2")}
    assert len(ids) == 2


def test_a_missing_data_file_is_an_error_with_its_line_and_the_resolved_path(tmp_path):
    p = only_problem(tmp_path, GBT.replace('"d.csv"', '"data/absent.csv"'))
    absent = (tmp_path / "data" / "absent.csv").resolve()
    assert (p.line, p.field, p.message) == (4, "jobs[0].data", f"data {str(absent)!r} does not exist")
    assert "relative to the manifest's directory" in p.fix


def test_an_s3_object_the_store_cannot_find_is_an_error_with_its_line(tmp_path):
    from core.errors import StoreError

    def absent(uri):
        raise StoreError(f"{uri}: no such object in the store")
    path = write(tmp_path, GBT.replace('"d.csv"', '"s3://bucket/absent.csv"'))
    with pytest.raises(ManifestError) as e:
        load(path, DataResolver(s3=absent))
    [p] = e.value.problems
    assert (p.line, p.field) == (4, "jobs[0].data") and "no such object" in p.message
    assert "FLEET_S3_ENDPOINT_URL" in p.fix


def test_a_sweep_of_many_points_hashes_its_data_once(tmp_path):
    hashed = []
    resolver = DataResolver(progress=lambda label, total: hashed.append(label))
    text = GBT + "[jobs.sweep]\nseed = " + str(list(range(500))) + "\n"
    text += GBT.replace('"a"', '"b"') + "seed = 700\n"   # a second table naming the same file
    m = load(write(tmp_path, text), resolver)
    assert len(m.jobs) == 501 and len({j.data for j in m.jobs}) == 1
    assert hashed == ["hashing d.csv"]


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_a_data_directory_is_pinned_by_its_files_not_by_where_or_when_they_were_written(tmp_path):
    import os
    files = {"images/a.bin": b"a" * 100, "images/sub/b.bin": b"b", "labels.csv": b"x\n"}
    text = COMMAND + 'data = "set"\n'
    first = job_of(make_tree(tmp_path / "one", {f"set/{k}": v for k, v in files.items()}).parent / "one", text)
    two = make_tree(tmp_path / "two", {f"set/{k}": v for k, v in reversed(files.items())})
    os.utime(two / "set" / "labels.csv", (1, 1))
    second = job_of(two, text)
    assert first.data == second.data and first.data.endswith("/set/")
    (two / "set" / "images" / "sub" / "b.bin").write_bytes(b"B")
    assert job_of(two, text).data != first.data


def test_an_empty_data_directory_is_pinned_like_any_other(tmp_path):
    (tmp_path / "empty").mkdir()
    assert job_of(tmp_path, COMMAND + 'data = "empty"\n').data.endswith("/empty/")


@pytest.mark.parametrize("glob, message", [
    ("../*.marker", "artifacts glob '../*.marker' leaves the job's directory ('..')"),
    ("out/../../secret", "artifacts glob 'out/../../secret' leaves the job's directory ('..')"),
    ("/etc/*", "artifacts glob '/etc/*' is absolute: artifacts come from the job's directory only"),
    ("~/x", "artifacts glob '~/x' is absolute: artifacts come from the job's directory only"),
])
def test_an_artifacts_glob_that_leaves_the_job_directory_is_an_error_with_its_line_and_fix(tmp_path, glob, message):
    p = only_problem(tmp_path, COMMAND + f'artifacts = ["out/*.txt", "{glob}"]\n')
    assert (p.line, p.field, p.message) == (4, "jobs[0].artifacts", message)
    assert p.fix


@pytest.mark.parametrize("glob", ["out/*", "**/*.pt", "out/..hidden", "checkpoints/model.pt"])
def test_an_artifacts_glob_inside_the_job_directory_is_accepted(tmp_path, glob):
    assert job_of(tmp_path, COMMAND + f'artifacts = ["{glob}"]\n').artifacts == (glob,)


# --- the example manifest ------------------------------------------------------------------------

def test_the_example_manifest_puts_its_jobs_in_the_tiers_its_comments_intend():
    m = load(EXAMPLE)
    assert m.tiers == DEFAULT_TIERS
    routes = {j.name: route(j, m.tiers, m.hosts) for j in m.jobs}
    assert {name: (r.tier, r.fallback_tier) for name, r in routes.items()} == {
        "gbt-breast-cancer[seed=0]": ("cpu", None),
        "gbt-breast-cancer[seed=1]": ("cpu", None),
        "mlp-wine": ("cuda", None),
        "mlp-diabetes-large": ("cuda-large", None),
        "gbt-diabetes-prefers-gpu": ("cuda", "cpu"),
        "report-command": ("cpu", None),
    }
    assert {r.tier for r in routes.values()} == {"cpu", "cuda", "cuda-large"}
    assert all(r.queue == r.tier for r in routes.values())  # no host constraint in the example


def test_the_example_manifests_data_is_pinned_to_the_files_next_to_it():
    m = load(EXAMPLE)
    assert m.hosts["local-cpu"] == HostPolicy("local-cpu", ("cpu",), None, ("mlp",), {})
    for job in m.jobs:
        if job.model:
            source = m.data_sources[job.data.split("/")[2]]
            assert source.path.parent == EXAMPLE.parent / "data"
            assert job.data == f"store+sha256://{sha(source.path.read_bytes())}/{source.path.name}"


def test_a_hyper_typo_is_reported_even_when_the_same_job_has_other_problems(tmp_path):
    found = problems(tmp_path, '[[jobs]]\nname = "a"\nmodel = "gbt"\ndata = "d.csv"\nhyper = { lr = 0.1 }\nprority = 3\n')
    assert [(p.line, p.field) for p in found] == [(5, "jobs[0].hyper.lr"), (6, "jobs[0].prority")]
    assert "learning_rate" in found[0].fix and "'priority'" in found[1].fix


def test_the_readme_manifest_example_is_valid():
    import re
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"## Manifest\n\n```toml\n(.*?)```", readme, re.S).group(1)
    from manifest.loader import loads
    manifest = loads(block, str(EXAMPLE))  # its data paths are the example's
    assert [t.name for t in manifest.tiers] == ["cuda-xl", "cuda", "cpu"]
    assert len(manifest.jobs) == 6


def test_a_mistyped_require_cuda_is_reported_once_not_also_as_a_vram_need_without_it():
    from manifest.loader import loads
    with pytest.raises(ManifestError) as e:
        loads('[[jobs]]\nname = "x"\ncommand = ["true"]\nrequire_cuda = "yes"\nmin_vram_gib = 8\n', "m.toml")
    assert [p.field for p in e.value.problems] == ["jobs[0].require_cuda"]
