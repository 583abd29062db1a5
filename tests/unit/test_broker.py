"""FLEET_BROKER_URL and its companions, read by a table: schemes, TLS files, Sentinel, masking."""

import ssl

import pytest

from core.errors import ConfigError
from state.broker import masked, parse


@pytest.mark.parametrize(
    "url, env, hosts, db, sentinel",
    [
        ("redis://127.0.0.1:6379/0", {}, (("127.0.0.1", 6379),), 0, False),
        ("redis://u:p@h/3", {}, (("h", 6379),), 3, False),
        ("rediss://h:6380/1", {}, (("h", 6380),), 1, False),
        (
            "sentinel://a:26379;sentinel://b:26380",
            {"FLEET_SENTINEL_MASTER": "m"},
            (("a", 26379), ("b", 26380)),
            0,
            True,
        ),
        ("sentinel://a", {"FLEET_SENTINEL_MASTER": "m"}, (("a", 26379),), 0, True),
    ],
)
def test_accepted_urls_give_their_hosts_database_and_transport(url, env, hosts, db, sentinel):
    s = parse(url, environ=env)
    assert (s.hosts, s.db, s.sentinel) == (hosts, db, sentinel)


@pytest.mark.parametrize(
    "url, env, words",
    [
        ("amqp://h", {}, "redis://, rediss:// or sentinel://"),
        ("redis://h/x", {}, "database number"),
        ("redis://a;redis://b", {}, "only for sentinel://"),
        ("sentinel://a", {}, "FLEET_SENTINEL_MASTER"),
        ("redis://h", {"FLEET_REDIS_CA_FILE": "/etc/hosts"}, "not a rediss://"),
        ("rediss://h", {"FLEET_REDIS_CA_FILE": "/no/such/ca.pem"}, "FLEET_REDIS_CA_FILE"),
        ("rediss://h", {"FLEET_REDIS_CERT_FILE": "/etc/hosts"}, "go together"),
        ("redis://h", {"FLEET_REDIS_WAIT_REPLICAS": "two"}, "FLEET_REDIS_WAIT_REPLICAS"),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(url, env, words):
    with pytest.raises(ConfigError, match=words):
        parse(url, environ=env)


def test_rediss_always_verifies_the_server_certificate():
    s = parse("rediss://h", environ={"FLEET_REDIS_CA_FILE": "/etc/hosts"})
    assert s.ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/etc/hosts"}


def test_a_password_is_never_in_masked_urls_errors_or_reprs():
    url = "sentinel://u:hunter2@a:1;sentinel://:hunter2@b:2"
    s = parse(url, environ={"FLEET_SENTINEL_MASTER": "m"})
    assert "hunter2" not in masked(url) + repr(s) + s.where
    with pytest.raises(ConfigError) as e:
        parse("redis://u:hunter2@h/x")
    assert "hunter2" not in str(e.value)


def test_sentinel_waits_for_one_replica_by_default_and_plain_redis_does_not():
    assert parse("sentinel://a", environ={"FLEET_SENTINEL_MASTER": "m"}).wait_replicas == 1
    assert parse("redis://a").wait_replicas == 0


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://PASSW0RD@127.0.0.1/", "http://***@127.0.0.1/"),
        ("amqp://TOKEN@host", "amqp://***@host"),
        ("redis://u:hunter2@h:6379/0", "redis://***@h:6379/0"),
        ("rediss://:hunter2@h/1", "rediss://***@h/1"),
        ("s3://AKIA:hunter2@bucket/prefix", "s3://***@bucket/prefix"),
        ("sentinel://u:hunter2@a:1;sentinel://TOKEN@b:2", "sentinel://***@a:1;sentinel://***@b:2"),
        ("redis://u:hun@ter2@h/0", "redis://***@h/0"),  # an @ left unencoded in the password
        ("u:hunter2@h:6379/0", "***@h:6379/0"),  # no scheme at all
        ("redis://h/0?password=hunter2&db=1", "redis://h/0?password=***&db=1"),
        ("redis://h:6379/0", "redis://h:6379/0"),
    ],
)
def test_masking_hides_any_userinfo_and_secret_query_values_whatever_the_scheme(url, shown):
    assert masked(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "http://PASSW0RD@127.0.0.1/",
        "amqp://PASSW0RD@host",
        "PASSW0RD@127.0.0.1:6379/0",
        "redis://PASSW0RD@h/x",
        "redis://u:PASSW0RD@h:port/0",
        "redis://PASSW0RD@a;redis://b",
        "sentinel://PASSW0RD@a;redis://b",
    ],
)
def test_no_refusal_of_a_url_shows_its_secret(url):
    with pytest.raises(ConfigError) as e:
        parse(url, environ={"FLEET_SENTINEL_MASTER": "m"})
    assert "PASSW0RD" not in str(e.value)
    assert "FLEET_BROKER_URL" in str(e.value)


def test_a_refused_connection_reads_as_one_sentence_without_a_stray_full_stop():
    import redis

    from state.redis_conn import explain

    line = explain(
        redis.ConnectionError("Error 111 connecting to localhost:6379. Connection refused."),
        parse("redis://127.0.0.1:6379/0"),
    )
    assert "Connection refused; start it" in line and ".;" not in line
