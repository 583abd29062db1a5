"""fleet reads and writes Optuna only through its public interface: the search's mirror keeps
its own storage (``optuna.storages.InMemoryStorage``) and asks it by the BaseStorage methods,
so no private attribute of a study or trial is touched that an Optuna release could rename."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = re.compile(r"(?<!\bself)\._(storage|study_id|trial_id)\b")


def test_no_fleet_module_reads_a_private_attribute_of_an_optuna_study_or_trial():
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for top in ("core", "manifest", "routing", "state", "tasks", "fleet", "trainers")
        for path in sorted((ROOT / top).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert hits == [], "Optuna privates read (use the storage's public methods):\n" + "\n".join(
        hits
    )


def test_the_check_catches_the_forms_it_forbids():
    for line in ("s = study._storage", "t = trial._trial_id", "x = self.study._study_id"):
        assert PRIVATE.search(line), line
    assert not PRIVATE.search("self._study_id = storage.get_study_id_from_name(name)")
