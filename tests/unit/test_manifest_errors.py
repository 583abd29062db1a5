"""Broken manifests, every one named by file and line: unclosed constructs at the end of
the file, dotted headers and keys, deep nesting, non-finite numbers, out-of-range seeds.
Pure: manifests are written to tmp_path."""

import pytest

from manifest.lines import LineMap, scan
from tests.unit.manifest_cases import COMMAND, only_problem

# COMMAND's lines: [[jobs]] 1, name 2, command 3; what a test appends starts at line 4.


@pytest.mark.parametrize(
    "tail, line, kind, closer",
    [
        ("hyper = { a = [1,\n  2,\n", 4, "array", "]"),  # array in an inline table
        ("[jobs.sweep]\nseed = [0,\n  1,\n  2\n", 5, "array", "]"),
        ("hyper = { a = 1", 4, "inline table", "}"),
        ('artifacts = """out/*\n\n', 4, "multi-line string", '"""'),
        ("artifacts = '''out/*\n", 4, "multi-line string", "'''"),
        # brackets in strings do not count
        (
            '[jobs.sweep]\nseed = [0, "[", "#", 1\n',
            5,
            "array",
            "]",
        ),
    ],
)
def test_a_construct_left_open_at_the_end_of_the_file_is_named_at_the_line_it_began(
    tmp_path, tail, line, kind, closer
):
    p = only_problem(tmp_path, COMMAND + tail)
    assert (p.line, p.field) == (line, "(syntax)")
    assert f"the {kind} opened at line {line} is never closed" in p.message
    assert closer in p.fix


def test_an_unclosed_array_inside_another_names_both_lines(tmp_path):
    p = only_problem(tmp_path, COMMAND + "hyper = { a = [[1, 2],\n  [3, 4\n")
    assert p.line == 5
    assert (
        "the array opened at line 5 is never closed; it is inside the inline table opened at line 4"
        in p.message
    )


def test_an_unknown_top_level_key_written_as_a_dotted_header_is_reported_at_the_header(tmp_path):
    p = only_problem(tmp_path, COMMAND + "\n[colour.x]\ny = 1\n")
    assert (p.line, p.field, p.message) == (5, "colour", "unknown key")


def test_an_unknown_key_written_as_a_dotted_key_is_reported_at_its_line(tmp_path):
    p = only_problem(tmp_path, COMMAND + "colour.x = 1\n")
    assert (p.line, p.field, p.message) == (4, "jobs[0].colour", "unknown key")


def test_an_unknown_job_table_written_as_a_dotted_header_is_reported_at_the_header(tmp_path):
    p = only_problem(tmp_path, COMMAND + "[jobs.bogus.deep]\nq = 1\n")
    assert (p.line, p.field, p.message) == (4, "jobs[0].bogus", "unknown key")


@pytest.mark.parametrize(
    "tail",
    [
        "hyper = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n",
        "hyper = { a = " + "[" * 2000 + "]" * 2000 + " }\n",
        "hyper = { a = " + "[" * 200 + "]" * 200 + " }\n",  # parses, then fails the depth check
    ],
)
def test_hyper_nested_thousands_deep_is_a_clear_error_at_its_line(tmp_path, tail):
    p = only_problem(tmp_path, COMMAND + tail)
    assert p.line == 4
    assert "nested more than 32 levels deep" in p.message and "flatten" in p.fix


def test_a_table_header_thousands_of_keys_deep_is_a_clear_error_at_its_line(tmp_path):
    p = only_problem(tmp_path, COMMAND + "[jobs.hyper." + ".".join(["k"] * 2000) + "]\nv = 1\n")
    assert p.line == 4 and p.field.startswith("jobs[0].hyper.k") and p.field.endswith("...")


def test_a_cli_publish_of_a_deeply_nested_manifest_exits_2_naming_the_line(tmp_path, capsys):
    from fleet import cli

    path = tmp_path / "deep.toml"
    path.write_text(COMMAND.lstrip("\n") + "hyper = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n")
    assert cli.main(["publish", str(path), "--dry-run"]) == 2
    assert f"{path}:4: (syntax): nested more than 32 levels deep" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400"])
def test_a_number_that_is_not_finite_is_named_at_its_line(tmp_path, value):
    p = only_problem(tmp_path, COMMAND + f"timeout_s = {value}\n")
    assert (p.line, p.field) == (4, "jobs[0].timeout_s")
    assert p.message.startswith("must be a finite number")


@pytest.mark.parametrize(
    "tail, line, field",
    [
        ("seed = 4294967296\n", 4, "jobs[0].seed"),
        ("seed = -1\n", 4, "jobs[0].seed"),
        ("[jobs.sweep]\nseed = [0, 99999999999999999999]\n", 5, "jobs[0].sweep.seed"),
    ],
)
def test_a_seed_outside_32_bits_is_named_at_its_line(tmp_path, tail, line, field):
    p = only_problem(tmp_path, COMMAND + tail)
    assert (p.line, p.field) == (line, field) and "0..4294967295" in p.message


def test_a_bracket_inside_a_string_does_not_hide_the_lines_after_it(tmp_path):
    text = (
        COMMAND.replace('command = ["python", "train.py"]', 'command = ["echo", "[", "#{"]')
        + "prority = 1\n"
    )
    p = only_problem(tmp_path, text)
    assert (p.line, p.field) == (4, "jobs[0].prority")


def test_keys_after_a_multi_line_array_keep_their_lines():
    lines = LineMap('[[jobs]]\nname = "a"\ncommand = [\n  "x",\n  "y = 1",\n]\nseed = 3\n')
    assert lines.line("jobs", 0, "seed") == 7
    # a string inside the array is not a key: falls back to the job
    assert lines.line("jobs", 0, "y") == 1


def test_the_scan_of_a_closed_document_finds_nothing_open():
    found = scan('a = [1, [2, 3]]\nb = { c = "}" }\nd = """\n]\n"""\n')
    assert (found.unclosed, found.outer, found.too_deep) == (None, None, None)
    assert found.continued == {4, 5}
