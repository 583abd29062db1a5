import os

# pytest-xdist's test processes start with COLUMNS=80 whatever the terminal: `fleet`'s tables
# (160 wide into a pipe unless COLUMNS says otherwise: fleet/cli/common.py) would wrap there
# and not in a plain run. So each test process gets the COLUMNS that pytest was started with.
COLUMNS_SEEN = "FLEET_TEST_COLUMNS"
if os.environ.get("PYTEST_XDIST_WORKER"):
    if os.environ.get(COLUMNS_SEEN):
        os.environ["COLUMNS"] = os.environ[COLUMNS_SEEN]
    else:
        os.environ.pop("COLUMNS", None)
else:
    os.environ[COLUMNS_SEEN] = os.environ.get("COLUMNS", "")

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.redis",
    "tests.fixtures.leaks",
    "tests.harness.chaos",  # the `chaos` fixture
    "tests.harness.pools",  # the `pools` fixture
]

# Run in parallel (scripts/test: pytest-xdist, --dist loadgroup), a module- or class-scoped
# fixture (a module's shared fleet) is set up once per process that runs one of its tests.
# So the tests of a module that uses one go together to one process; every other test is
# handed out on its own. New modules need nothing: the grouping follows the fixtures.
SHARED_SCOPES = frozenset({"module", "class", "package"})


def shares_a_fixture(item) -> bool:
    """Whether ``item`` uses a fixture set up once for several tests but not for the session."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    return any(d[-1].scope in SHARED_SCOPES for d in defs if d)


def pytest_collection_modifyitems(config, items) -> None:
    import pytest

    for item in items:
        if shares_a_fixture(item) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
