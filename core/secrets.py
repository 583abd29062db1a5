"""What counts as a secret in an environment (by name, by credentials inside a URL, by
value), and ``masked``: the one way fleet shows a URL in a message or a log.

Jobs never see these (``tasks.isolation``); ``fleet enroll`` writes them only into files
readable by root.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(
    r"SECRET|TOKEN|PASSW|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|_KEY(_ID)?$|SESSION"
    r"|BROKER|BACKEND|REDIS_URL|(^|_)AUTH",
    re.I,
)
SECRET_PREFIXES = (
    "AWS_",
    "FLOWER_",
    "CELERY_",
    "AZURE_",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "FLEET_BROKER",
    "FLEET_RESULT",
    "FLEET_REDIS",
    "FLEET_SENTINEL",
    "FLEET_S3_",
)
# any userinfo: user:password@, :password@, or a token alone as the user (https://TOKEN@host)
URL_USERINFO = re.compile(r"[a-z][a-z0-9+.-]*://([^/?#@\s]+)@", re.I)
MIN_SECRET_LEN = 6  # shorter values are too likely to occur by chance in harmless ones
# A user alone in a URL is taken for a token when at least this long: shorter ones are login
# names (git@, ubuntu@) that harmless values hold too (HOME=/home/ubuntu).
MIN_TOKEN_LEN = 16
MASK = "***"
SECRET_QUERY = re.compile(r"([?&][^=&#]*(?:pass|pwd|token|secret|auth|key)[^=&#]*=)[^&#]*", re.I)


def masked(url: str) -> str:
    """``url`` fit for a message or a log: the whole userinfo of each ;-separated address
    (``user:password@``, a user alone, a token) and secret-named query values become ``***``,
    whatever the scheme, and with no scheme at all. The one masking of URLs in fleet."""
    return ";".join(_masked_address(part) for part in url.split(";"))


def _masked_address(part: str) -> str:
    scheme, sep, rest = part.partition("://")
    if not sep:
        scheme, rest = "", part
    # the last @ ends the userinfo (an unencoded @ in a password); masking a little too much is fine
    _, at, host = rest.rpartition("@")
    return SECRET_QUERY.sub(rf"\1{MASK}", f"{scheme}{sep}{MASK}{at}{host}" if at else part)


def _url_secrets(value: str) -> set[str]:
    """The secret part of each URL userinfo in ``value``: its password, or a token as the user."""
    found = set()
    for m in URL_USERINFO.finditer(value):
        user, colon, password = m.group(1).partition(":")
        secret, least = (password, MIN_SECRET_LEN) if colon else (user, MIN_TOKEN_LEN)
        if len(secret) >= least:
            found.add(secret)
    return found


def secret_name(name: str) -> bool:
    return name.upper().startswith(SECRET_PREFIXES) or bool(SECRET_NAME.search(name))


def secret_values(env: Mapping[str, str]) -> set[str]:
    """Values a job must never see: secret-named variables, and passwords and tokens inside
    URLs."""
    found = {v for k, v in env.items() if secret_name(k) and len(v) >= MIN_SECRET_LEN}
    for value in env.values():
        found |= _url_secrets(value)
    return found


def is_secret(name: str, value: str, secrets: set[str]) -> bool:
    """A variable a job must not see: by its name, a URL with any userinfo in its value, or a
    secret value within it."""
    return secret_name(name) or bool(URL_USERINFO.search(value)) or any(s in value for s in secrets)
