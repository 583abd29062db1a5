import os
import signal

# A suite started in the background by a script (`scripts/test &`) starts with Ctrl+C ignored
# (POSIX does that to a non-interactive shell's background jobs), and every process it starts
# would inherit that: the tests that press Ctrl+C (`fleet status --watch`, `fleet local`) need it
# back as a terminal has it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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
    "tests.fixtures.parallel",  # which tests share a process in a parallel run
    "tests.harness.chaos",  # the `chaos` fixture
    "tests.harness.pools",  # the `pools` fixture
    "tests.harness.users",  # the `job_user` fixture
]
