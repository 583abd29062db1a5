"""core.ids.short_id: the one short form of a job ID or digest."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from core import constants as C
from core.ids import short_id

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "state", "routing", "manifest", "artifacts", "trainers", "tasks", "fleet")
# a name that holds an ID or a digest: job_id, run_id, digest, sha256, job.job_id, ...
ID_NAME = re.compile(r"(^|_)(id|digest|sha\d*)$")
# cuts that are not the short form: `fleet status` widens its ID column until every prefix in
# the table is unique
NOT_SHORT_FORMS = {"fleet/cli/jobs.py": {"r.job_id[:id_len]"}}


def test_short_id_is_the_first_twelve_characters_of_a_job_id():
    full = "ab" * 32
    assert C.SHORT_ID_CHARS == 12 and short_id(full) == full[:12]


def test_short_id_of_a_short_value_is_the_value():
    assert short_id("abc") == "abc"


def cuts_of_an_id(source: str, allowed: set[str] = frozenset()) -> list[int]:
    """Lines where an ID or digest is cut by hand (``x_id[:n]``, ``digest[:8]``, ...), but for
    the cuts in ``allowed`` (their source text)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)):
            continue
        cut = node.slice
        name = getattr(node.value, "attr", None) or getattr(node.value, "id", "")
        if cut.lower is None and cut.upper is not None and ID_NAME.search(name):
            if ast.get_source_segment(source, node) not in allowed:
                lines.append(node.lineno)
    return lines


def test_the_check_sees_a_cut_of_any_length_by_any_id_name():
    source = (
        "a = job.job_id[:8]\nb = digest[:12]\nc = sha256[: N]\nd = names[:8]\ne = short_id(x)\n"
    )
    assert cuts_of_an_id(source) == [1, 2, 3]


def test_nothing_but_core_ids_cuts_a_job_id_by_hand():
    by_hand = [
        f"{p.relative_to(ROOT)}:{n}"
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        for n in cuts_of_an_id(p.read_text(), NOT_SHORT_FORMS.get(f"{p.relative_to(ROOT)}", set()))
    ]
    assert by_hand == [], "use core.ids.short_id for the short form of an ID"
