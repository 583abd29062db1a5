# fleet image: a Celery worker by default; the same image runs flower and the fleet CLI.
#
#   docker build -t fleet-worker .                      # with trainers (torch CPU wheel)
#   docker build -t fleet-light --build-arg EXTRAS= .   # core only: flower, publisher, CLI
#   docker build -t fleet-gpu --build-arg TORCH_INDEX_URL= .  # torch from PyPI (CUDA build)

ARG PYTHON_IMAGE=python:3.11.9-slim-bookworm

# --- build: a virtualenv in /opt/venv, copied whole into the runtime stage ------------
FROM ${PYTHON_IMAGE} AS build

# EXTRAS: optional-dependency groups of pyproject.toml, comma separated ("" = light core).
ARG EXTRAS=train
# The CPU wheel index keeps the image about 2 GB smaller than PyPI's CUDA build of torch.
# Set it empty for an image that runs on a real GPU.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

# A compiler for the sdists that lack a wheel on some platforms.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

RUN python -m venv /opt/venv && pip install --upgrade pip

WORKDIR /src

# Dependencies first, from pyproject.toml alone, so a source edit does not reinstall torch.
COPY pyproject.toml ./
RUN python -c "import os, tomllib; \
p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
extras = [e.strip() for e in os.environ.get('EXTRAS', '').split(',') if e.strip()]; \
reqs = p['dependencies'] + [r for e in extras for r in p['optional-dependencies'][e]]; \
print('\n'.join(reqs))" > /tmp/requirements.txt \
    && cat /tmp/requirements.txt \
    && pip install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} -r /tmp/requirements.txt

# Then the project itself (not editable: the runtime stage has no /src).
COPY . .
# The find_spec check fails the build if a module the commands need was not packaged,
# without importing it (importing tasks would read broker settings at build time).
RUN pip install --no-deps . \
    && cd / && python -c "import sys, importlib.util as u; \
missing = [m for m in ('tasks', 'celeryconfig', 'fleet.cli') if u.find_spec(m) is None]; \
sys.exit(f'not installed: {missing}' if missing else 0)"

# --- runtime ---------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

# libgomp1: OpenMP runtime that xgboost's wheel links against but does not bundle.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 fleet \
    && useradd --system --uid 10001 --gid fleet --home-dir /app --shell /usr/sbin/nologin fleet \
    && mkdir -p /app /data /work /acl \
    && chown fleet:fleet /app /data /work /acl

COPY --from=build /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/app

WORKDIR /app
# Flower reads flowerconfig.py from its working directory (basic auth, listen address).
COPY --chown=fleet:fleet flowerconfig.py /app/flowerconfig.py
USER fleet

# No -Q: the worker detects this host's capability and subscribes to the queues it qualifies
# for. Run under an init (compose `init: true`, or `docker run --init`) so SIGTERM reaches
# celery and a job is stopped cleanly.
CMD ["celery", "-A", "tasks", "worker", "--loglevel=INFO"]
