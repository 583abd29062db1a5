"""The README and docs/: each shell snippet parses as bash, every `fleet` verb and flag they
use exists in the CLI (so the walkthrough cannot drift from the commands), the README stays a
first read with a map of every page, and the reference says what the code does."""

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from fleet.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def bash_blocks(path: Path) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", path.read_text(), re.S)


def fleet_commands(block: str) -> list[list[str]]:
    """Each `fleet ...` invocation in a block, as words, up to the first shell operator."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.split(" #", 1)[0]
        for part in re.split(r"&&|\|\||;|\|", line):
            words = shlex.split(part, comments=True)
            # the command word: after sudo/-E/VAR=value, never an argument that ends in /fleet
            idx = next(
                (
                    i
                    for i, w in enumerate(words)
                    if w not in ("sudo", "-E", "exec") and "=" not in w
                ),
                None,
            )
            if (
                idx is not None
                and (words[idx] == "fleet" or words[idx].endswith("/bin/fleet"))
                and idx + 1 < len(words)
            ):
                out.append([w for w in words[idx + 1 :] if not w.startswith(">")])
    return out


def subparsers() -> dict:
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


SNIPPETS = [(p.name, i, b) for p in PAGES for i, b in enumerate(bash_blocks(p))]


@pytest.mark.parametrize("page,index,block", SNIPPETS, ids=[f"{p}#{i}" for p, i, _ in SNIPPETS])
def test_every_readme_shell_snippet_parses_as_bash(page, index, block):
    run = subprocess.run(["bash", "-n"], input=block, text=True, capture_output=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("page,index,block", SNIPPETS, ids=[f"{p}#{i}" for p, i, _ in SNIPPETS])
def test_every_fleet_verb_and_flag_in_the_readme_exists(page, index, block):
    verbs = subparsers()
    for words in fleet_commands(block):
        if words[0].startswith("-"):
            assert words[0] in ("--help", "-h"), words
            continue
        assert words[0] in verbs, f"{page}: `fleet {' '.join(words)}`: no verb {words[0]!r}"
        known = {s for a in verbs[words[0]]._actions for s in a.option_strings}
        for w in words[1:]:
            if w.startswith("-"):
                assert w.split("=", 1)[0] in known, (
                    f"{page}: `fleet {' '.join(words)}`: no option {w}"
                )


README_LINES = 250  # a newcomer reads it in ten minutes; the reference lives in docs/


def test_the_readme_starts_with_the_two_commands_then_the_walkthrough_hosts_and_the_map():
    text = (ROOT / "README.md").read_text()
    assert (
        text.index("scripts/local-fleet")
        < text.index("## Ten minutes with a local fleet")
        < text.index("## Adding a GPU host")
        < text.index("## Documentation")
    )
    assert (
        "scripts/test" in text and ".venv/bin/fleet" in text and "source .venv/bin/activate" in text
    )
    assert len(fleet_commands("\n".join(bash_blocks(ROOT / "README.md")))) >= 10
    assert len(text.splitlines()) <= README_LINES, (
        "the README is a first read: move reference text to docs/"
    )


def test_the_readmes_map_lists_every_page_in_docs():
    text = (ROOT / "README.md").read_text()
    listed = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", text.split("## Documentation", 1)[1]))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages - listed == set(), "add these pages to the README's Documentation list"
    assert listed - pages == set(), "the README's Documentation list names pages that do not exist"


def test_every_link_to_a_page_in_the_readme_and_docs_finds_it():
    for page in PAGES:
        for target in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]*)?\)", page.read_text()):
            assert (page.parent / target).resolve().exists(), f"{page.name}: no page {target}"


def test_the_walkthroughs_stop_names_the_fleets_folder():
    # run from another folder, `fleet local --stop` alone would look for ./.fleet-local there
    text = (ROOT / "README.md").read_text()
    stops = [w for w in fleet_commands("\n".join(bash_blocks(ROOT / "README.md"))) if "--stop" in w]
    assert stops and all("--root" in w for w in stops)
    assert "on a host that built it" in text  # another host builds the environment again


def test_every_variable_a_job_is_given_is_documented():
    from trainers import protocol

    text = (ROOT / "docs" / "manifest.md").read_text()
    section = text.split("## What a command job is given", 1)[1].split("\n## ", 1)[0]
    names = [v for k, v in vars(protocol).items() if k.startswith("ENV_")]
    names += [
        "CUDA_VISIBLE_DEVICES",
        "PYTHONUNBUFFERED",
        *protocol.THREAD_VARS,
        protocol.METRIC_PREFIX.strip(),
    ]
    assert [n for n in names if f"`{n}" not in section] == []


def test_a_benchmark_figure_names_the_command_that_produced_it():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    for section in text.split("\n## ")[1:]:
        title, body = section.split("\n", 1)
        assert re.search(r"`python bench/\w+\.py", body), f"benchmarks.md, {title}: which command?"
        script = re.search(r"`python (bench/\w+\.py)", body).group(1)
        assert (ROOT / script).exists(), script


def test_the_docs_sweep_name_and_bundle_file_name_are_what_fleet_makes():
    from fleet.cli.artifacts import file_stem
    from manifest.loader import loads

    text = (ROOT / "docs" / "manifest.md").read_text() + (
        ROOT / "docs" / "operating.md"
    ).read_text()
    m = loads(
        '[[jobs]]\nname = "gbt-moons"\ncommand = ["true"]\n'
        "[jobs.sweep]\nseed = [1]\nmax_depth = [4]\n",
        "m.toml",
    )
    [job] = m.jobs
    assert job.name == "gbt-moons[max_depth=4,seed=1]" and f"named {job.name}" in text
    assert f"`{job.name}` -> `{file_stem(job.name)}.tar.zst`" in text
