pytest_plugins = ["tests.fixtures.s3", "tests.fixtures.redis", "tests.fixtures.leaks"]
