pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.redis",
    "tests.fixtures.leaks",
    "tests.harness.chaos",  # the `chaos` fixture
    "tests.harness.pools",  # the `pools` fixture
]
