"""docs/settings.md is what `fleet settings --markdown` prints from core.registry."""

from pathlib import Path

from core import registry
from fleet.cli.settings import markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_the_settings_doc_matches_the_registry():
    assert DOC.read_text() == markdown(), (
        "docs/settings.md differs from core.registry: run "
        "`.venv/bin/python -m fleet.cli settings --markdown > docs/settings.md`"
    )


def test_the_settings_doc_names_every_variable_and_marks_those_given_to_jobs():
    text = DOC.read_text()
    assert all(f"`{s.name}`" in text for s in registry.SETTINGS)
    assert text.index("## Given to jobs") < text.index("`FLEET_JOB_ID`")
