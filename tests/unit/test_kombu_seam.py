"""The kombu boundary: every private fleet overrides or calls is pinned, and only the seam
touches them (tasks/kombu_seam.py)."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
from pathlib import Path

import kombu
import pytest
from kombu.transport import redis as kombu_redis

from state import queues
from tasks import kombu_seam

ROOT = Path(__file__).resolve().parents[2]
PINNED_KOMBU = "5.7."
# sha256 (first 16 hex) of inspect.getsource for kombu 5.7.0; recorded by hand after reading
# each method: an upgrade that changes one fails here and names it
SOURCE_HASHES = {
    "kombu.transport.redis:Channel._brpop_start": "06723d707ddf2240",
    "kombu.transport.redis:Channel._brpop_read": "c42518699709f2df",
    "kombu.transport.redis:Channel._get": "be26a9f1eb4cf8da",
    "kombu.transport.redis:Channel._size": "7cc839b42fdc5e3b",
    "kombu.transport.redis:Channel._purge": "221e37da7c172561",
    "kombu.transport.redis:Channel._do_restore_message": "8b430df94e45b5b0",
    "kombu.transport.redis:Channel._connparams": "e9a4295085a8fb90",
    "kombu.transport.redis:SentinelChannel._sentinel_managed_pool": "bde54a2d6e93ac13",
    "kombu.transport.redis:Channel._q_for_pri": "f3997660680dd00f",
    "kombu.transport.redis:Channel._get_message_priority": "07faea72a3d7025f",
    "kombu.transport.redis:Channel._restore": "92e63e38835b6592",
    "kombu.transport.redis:QoS.ack": "1bc15a4ddf541af6",
    "kombu.transport.redis:QoS.reject": "747a02434344d1a6",
    "kombu.transport.redis:PrefixedStrictRedis._prefix_args": "53c96d987a841f7d",
    "kombu.transport.virtual.base:Channel._lookup": "82b0e60149b5e172",
    "kombu.transport.virtual.base:Transport._deliver": "799e242f3ec53863",
    "kombu.transport.redis:Channel._flush_brpop_reauth": "bb4930b4fd3cf8f3",
    "kombu.transport.redis:Channel.close": "101e9b9cdad44b88",
    "kombu.transport.redis:QoS.restore_unacked": "8954efef014d546e",
    "kombu.utils.scheduling:round_robin_cycle.consume": "eebda26662b3ae48",
    "kombu.utils.scheduling:priority_cycle.rotate": "46da45e6d2043d84",
}
# what only the seam may say: kombu's Redis transport module and the privates it overrides
PRIVATE = re.compile(
    r"kombu\.transport\s+import\s+redis|kombu\.transport\.redis\b(?!:)|"
    r"\._(brpop_start|brpop_read|do_restore_message|q_for_pri|prefix_args|deliver|"
    r"connparams|queue_cycle|get_message_priority)\b"
)


def _source_hash(name: str) -> str:
    module, attr = name.split(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]


def test_the_installed_kombu_is_the_minor_version_pyproject_pins():
    pins = (ROOT / "pyproject.toml").read_text()
    assert '"kombu>=5.7,<5.8"' in pins, "pyproject.toml must pin kombu to the minor tested here"
    assert kombu.__version__.startswith(PINNED_KOMBU), (
        f"kombu {kombu.__version__} installed; the seam was checked against {PINNED_KOMBU}x only"
    )


def test_every_kombu_private_the_seam_touches_has_its_source_pinned():
    assert set(kombu_seam.TOUCHED) == set(SOURCE_HASHES), (
        "tasks/kombu_seam.py TOUCHED and SOURCE_HASHES here list different kombu privates: "
        "record the hash of each one the seam overrides or calls"
    )


@pytest.mark.parametrize("name", sorted(SOURCE_HASHES))
def test_kombu_private_method_is_unchanged(name):
    got = _source_hash(name)
    assert got == SOURCE_HASHES[name], (
        f"kombu {kombu.__version__} changed {name} (source hash {got}, pinned "
        f"{SOURCE_HASHES[name]}). Re-read it against its override or call in tasks/kombu_seam.py "
        "(queue order, poison set-aside, owner-list restore, the ack script, the reset guard), "
        "fix the seam if needed, then record the new hash here and the pin in pyproject.toml"
    )


def test_no_module_but_the_seam_touches_kombu_privates():
    offenders = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in (".venv", "tests", "build") or rel == Path("tasks/kombu_seam.py"):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if PRIVATE.search(line) and not line.lstrip().startswith("#"):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "kombu privates outside tasks/kombu_seam.py:\n" + "\n".join(offenders)


def test_kombu_names_its_priority_lists_as_state_queues_does():
    chan = kombu_redis.Channel.__new__(kombu_redis.Channel)
    chan.priority_steps = list(queues.PRIORITY_STEPS)
    assert kombu_redis.Channel.sep == queues.PRIORITY_SEP
    for pri in queues.PRIORITY_STEPS:
        assert chan._q_for_pri("cpu", pri) == queues.list_key("cpu", pri), f"priority {pri}"


class _ClosedTransport:
    client = None  # what kombu's Connection.close leaves a transport


class _Channel(kombu_seam.SeamChannelMixin, kombu_redis.Channel):
    pass


def _closed_channel() -> _Channel:
    """A channel whose kombu connection was closed under it (no broker needed)."""
    chan = _Channel.__new__(_Channel)
    chan.connection = _ClosedTransport()
    return chan


def test_a_channel_whose_connection_closed_reconnects_with_its_last_settings():
    chan = _closed_channel()
    chan._last_connparams = {False: {"host": "127.0.0.1", "port": 6399, "db": 0}}
    assert chan._connparams() == {"host": "127.0.0.1", "port": 6399, "db": 0}


def test_a_channel_that_never_connected_still_fails_as_kombu_does():
    with pytest.raises(AttributeError):  # nothing to reuse: kombu's own error, unchanged
        _closed_channel()._connparams()


class _SentinelChannel(kombu_seam.SeamSentinelChannelMixin, kombu_redis.SentinelChannel):
    master_name = "fleetmaster"


def test_a_sentinel_channel_whose_connection_closed_asks_its_last_sentinels():
    # a failover closed the connection while the channel restored its unacked messages: the
    # worker exited ('NoneType' object has no attribute 'alt') instead of reconnecting
    chan = _SentinelChannel.__new__(_SentinelChannel)
    chan.connection = _ClosedTransport()
    chan._last_connparams = {False: {"host": "127.0.0.1", "port": 26399, "db": 0}}
    chan._last_alt = ("sentinel://127.0.0.1:26399/0", "sentinel://127.0.0.1:26400/0")
    pool = chan._sentinel_managed_pool()  # builds the pool; connects on first use only
    assert [
        s.connection_pool.connection_kwargs["port"] for s in pool.sentinel_manager.sentinels
    ] == [
        26399,
        26400,
    ]
    assert chan.connection.client is None  # the stand-in lent, then taken back


def test_a_sentinel_channel_that_never_connected_still_fails_as_kombu_does():
    chan = _SentinelChannel.__new__(_SentinelChannel)
    chan.connection = _ClosedTransport()
    chan._last_connparams = {False: {"host": "127.0.0.1", "port": 26399, "db": 0}}
    with pytest.raises(AttributeError):
        chan._sentinel_managed_pool()


def test_the_seam_overrides_no_kombu_attribute_it_does_not_list():
    # a helper named like one of kombu's (Channel._receive is its pub/sub reader) would
    # replace it silently: every name the seam defines is new to kombu, or pinned in TOUCHED
    channel = set(dir(kombu_redis.Channel)) | set(dir(kombu_redis.SentinelChannel))
    touched = {name.rpartition(".")[2] for name in kombu_seam.TOUCHED}
    pairs = ((kombu_seam.SeamChannelMixin, channel), (kombu_seam.SeamQoS, dir(kombu_redis.QoS)))
    for cls, kombus in pairs:
        ours = {n for n in vars(cls) if not n.startswith("__") and n != "QoS"}
        shadowed = ours & set(kombus)
        assert shadowed <= touched, f"{cls.__name__} overrides kombu's {sorted(shadowed - touched)}"
