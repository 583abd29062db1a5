"""The example manifest and docs/manifest.md's manifest load, route as their comments say, and
pin their data to the files beside them."""

import hashlib
from pathlib import Path

from fleet.manifests import load, loads
from manifest.schema import HostPolicy
from routing.tiers import DEFAULT_TIERS, route
from tests.unit.manifest_cases import EXAMPLE


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def test_the_manifest_pages_example_is_valid():
    import re

    page = (Path(__file__).resolve().parents[2] / "docs" / "manifest.md").read_text()
    block = re.search(r"^# Manifests\n.*?```toml\n(.*?)```", page, re.S).group(1)
    manifest = loads(block, str(EXAMPLE))  # its data paths are the example's
    assert [t.name for t in manifest.tiers] == ["cuda-xl", "cuda", "cpu"]
    assert len(manifest.jobs) == 6
