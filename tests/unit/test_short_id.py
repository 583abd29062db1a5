"""core.ids.short_id: the one short form of a job ID or digest."""

from core import constants as C
from core.ids import short_id


def test_short_id_is_the_first_twelve_characters_of_a_job_id():
    full = "ab" * 32
    assert C.SHORT_ID_CHARS == 12 and short_id(full) == full[:12]


def test_short_id_of_a_short_value_is_the_value():
    assert short_id("abc") == "abc"


def test_nothing_but_core_ids_cuts_a_job_id_by_hand():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    by_hand = [
        f"{p.relative_to(root)}:{n}"
        for pkg in (
            "core",
            "state",
            "routing",
            "manifest",
            "artifacts",
            "trainers",
            "tasks",
            "fleet",
        )
        for p in (root / pkg).rglob("*.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\[:12\]", line)
    ]
    assert by_hand == []
