"""What counts as a secret in an environment: by name, by a password inside a URL, by value.

Jobs never see these (``tasks.isolation``); ``fleet enroll`` writes them only into files
readable by root.
"""
from __future__ import annotations

import re
from typing import Mapping

SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSW|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|_KEY(_ID)?$|SESSION"
                         r"|BROKER|BACKEND|REDIS_URL|(^|_)AUTH", re.I)
SECRET_PREFIXES = ("AWS_", "FLOWER_", "CELERY_", "AZURE_", "GOOGLE_APPLICATION_CREDENTIALS",
                   "FLEET_BROKER", "FLEET_RESULT", "FLEET_REDIS", "FLEET_SENTINEL", "FLEET_S3_")
URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s:]*:([^/@\s]+)@", re.I)
MIN_SECRET_LEN = 6      # shorter values are too likely to occur by chance in harmless ones


def secret_name(name: str) -> bool:
    return name.upper().startswith(SECRET_PREFIXES) or bool(SECRET_NAME.search(name))


def secret_values(env: Mapping[str, str]) -> set[str]:
    """Values a job must never see: secret-named variables and passwords inside URLs."""
    found = {v for k, v in env.items() if secret_name(k) and len(v) >= MIN_SECRET_LEN}
    for value in env.values():
        found.update(m.group(1) for m in URL_PASSWORD.finditer(value) if len(m.group(1)) >= MIN_SECRET_LEN)
    return found


def is_secret(name: str, value: str, secrets: set[str]) -> bool:
    return (secret_name(name) or bool(URL_PASSWORD.search(value))
            or any(s in value for s in secrets))
