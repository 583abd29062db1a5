"""docker-compose.yml checked without a Docker engine: the Compose schema plus fleet's own rules."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.needs import missing

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
SCHEMA_FILE = REPO_ROOT.parent / "shared" / "schemas" / "compose-spec.json"

# Tier floors of routing/tiers.py DEFAULT_TIERS that the simulated workers must land in.
CUDA_LARGE_MIN_VRAM_GIB = 24
CUDA_MIN_VRAM_GIB = 8
CUDA_LARGE_MIN_RAM_GIB = 16
CUDA_MIN_RAM_GIB = 8
MIN_STOP_GRACE_S = 30

SIMULATED_TIERS = {"worker-cpu": "cpu", "worker-cuda": "cuda", "worker-cuda-large": "cuda-large"}
SECRET_NAME = re.compile(r"(SECRET|PASSWORD|PASSWD|TOKEN|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
# A whole value that is one interpolation: ${VAR}, ${VAR:-default} or ${VAR-default}.
INTERPOLATION = re.compile(r"^\$\{(?P<var>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}$")
ANY_INTERPOLATION = re.compile(r"\$\{(?P<var>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}")
URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.I)


@pytest.fixture(scope="module")
def compose() -> dict:
    with COMPOSE_FILE.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


def workers(services: dict) -> dict:
    return {name: svc for name, svc in services.items() if name.startswith("worker")}


def argv(command) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(x) for x in command]


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def resolve_defaults(value: str) -> str:
    """The value compose would use with no variable set: each ${VAR:-d} becomes d."""
    return ANY_INTERPOLATION.sub(lambda m: m.group("default") or "", value)


def duration_s(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", str(text))
    assert parts and "".join(n + u for n, u in parts) == str(text), f"not a duration: {text!r}"
    return sum(float(n) * units[u] for n, u in parts)


def walk_strings(node, path="$"):
    """Every string in the file with its path, keys of mappings included."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield f"{path}.{k}", str(k)
            yield from walk_strings(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk_strings(v, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def test_the_compose_file_is_valid_against_the_compose_specification(compose):
    if not SCHEMA_FILE.is_file():
        missing(
            f"Compose schema not found at {SCHEMA_FILE} (shared/schemas/ is not beside the repo)"
        )
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    report = "\n".join(
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors
    )
    assert not errors, f"{len(errors)} schema error(s):\n{report}"


def test_the_compose_file_has_no_obsolete_version_key(compose):
    assert "version" not in compose


def test_redis_runs_with_the_append_only_file_on(services):
    args = argv(services["redis"]["command"])
    assert args[0] == "redis-server"
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] == "everysec"


def test_redis_and_minio_keep_their_data_in_named_volumes(compose, services):
    named = set(compose.get("volumes") or {})
    for name, target in (("redis", "/data"), ("minio", "/data")):
        mounts = [str(v).split(":") for v in services[name].get("volumes", [])]
        assert any(src in named and dst == target for src, dst, *_ in mounts), name


def test_every_worker_runs_celery_worker_without_a_fixed_queue_list(services):
    found = workers(services)
    assert set(SIMULATED_TIERS) | {"worker-gpu"} <= set(found)
    for name, svc in found.items():
        args = argv(svc["command"])
        assert args[:4] == ["celery", "-A", "tasks", "worker"], f"{name}: {args}"
        assert not any(a == "-Q" or a.startswith(("-Q", "--queues")) for a in args), (
            f"{name} pins its queues ({args}); routing is by detection"
        )


def test_workers_get_an_init_and_time_to_stop_a_job_cleanly(services):
    for name, svc in workers(services).items():
        assert svc.get("init") is True, name
        assert duration_s(svc.get("stop_grace_period", "10s")) >= MIN_STOP_GRACE_S, name


@pytest.mark.parametrize("name, tier", sorted(SIMULATED_TIERS.items()))
def test_each_simulated_worker_declares_a_capability_in_its_intended_tier(services, name, tier):
    raw = environment(services[name])["FLEET_CAPABILITY"]
    cap = json.loads(raw)
    assert isinstance(cap, dict), f"{name}: FLEET_CAPABILITY must be a JSON object"
    vram = max((float(d["vram_total_gib"]) for d in cap.get("cuda_devices", [])), default=0.0)
    ram = cap.get("ram_total_gib")
    if tier == "cuda-large":
        assert vram >= CUDA_LARGE_MIN_VRAM_GIB, f"{name}: {vram} GiB VRAM"
        assert ram is None or ram >= CUDA_LARGE_MIN_RAM_GIB, f"{name}: {ram} GiB RAM"
    elif tier == "cuda":
        assert CUDA_MIN_VRAM_GIB <= vram < CUDA_LARGE_MIN_VRAM_GIB, f"{name}: {vram} GiB VRAM"
        assert ram is None or ram >= CUDA_MIN_RAM_GIB, f"{name}: {ram} GiB RAM"
    else:
        assert cap.get("cuda_devices") == [], f"{name}: a cpu worker must declare no CUDA device"


def test_the_real_gpu_worker_reserves_nvidia_devices_and_detects_them_itself(services):
    svc = services["worker-gpu"]
    assert svc.get("profiles") == ["gpu"]
    assert "FLEET_CAPABILITY" not in environment(svc)
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]} in devices


def test_the_real_gpu_worker_shares_the_hosts_pid_namespace_so_nvml_sees_its_jobs(services):
    # NVML names a GPU's processes by host PID; in a PID namespace of its own the worker can
    # hold no share_gpu job to its VRAM budget (tasks.vramwatch), so it would serve none
    assert services["worker-gpu"].get("pid") == "host"


def test_no_secret_appears_as_a_literal_value(compose):
    problems = []
    for path, text in walk_strings(compose):
        if URL_WITH_PASSWORD.search(resolve_defaults(text)) and not ANY_INTERPOLATION.search(text):
            problems.append(f"{path}: URL with an inline password")
    for name, svc in compose["services"].items():
        for key, value in environment(svc).items():
            if SECRET_NAME.search(key) and not INTERPOLATION.match(value):
                problems.append(f"services.{name}.environment.{key}: literal {value!r}")
    assert not problems, "\n".join(problems)


def test_every_credential_default_agrees_with_the_one_minio_starts_with(compose):
    defaults: dict[str, set[str]] = {}
    for _, text in walk_strings(compose):
        for m in ANY_INTERPOLATION.finditer(text):
            defaults.setdefault(m.group("var"), set()).add(m.group("default") or "")
    disagreeing = {var: sorted(found) for var, found in defaults.items() if len(found) > 1}
    assert not disagreeing, f"one variable, several defaults: {disagreeing}"
    minio_env = environment(compose["services"]["minio"])
    for svc in workers(compose["services"]).values():
        env = environment(svc)
        assert env["AWS_ACCESS_KEY_ID"] == minio_env["MINIO_ROOT_USER"]
        assert env["AWS_SECRET_ACCESS_KEY"] == minio_env["MINIO_ROOT_PASSWORD"]


def test_minio_init_creates_the_bucket_the_workers_store_artifacts_in(services):
    init_env = {k: resolve_defaults(v) for k, v in environment(services["minio-init"]).items()}
    assert "mc mb" in " ".join(argv(services["minio-init"]["command"]))
    assert services["minio-init"].get("restart") == "no"
    for name, svc in workers(services).items():
        store_url = resolve_defaults(environment(svc)["FLEET_STORE_URL"])
        bucket = re.match(r"^s3://([^/]+)", store_url).group(1)
        assert bucket == init_env["FLEET_BUCKET"], name


def test_every_depends_on_target_is_a_service_of_the_file(services):
    missing = []
    for name, svc in services.items():
        deps = svc.get("depends_on") or []
        for target in deps if isinstance(deps, list) else deps.keys():
            if target not in services:
                missing.append(f"{name} -> {target}")
    assert not missing, missing


def test_services_that_wait_for_health_depend_on_services_with_a_healthcheck(services):
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        if isinstance(deps, dict):
            for target, cond in deps.items():
                if cond.get("condition") == "service_healthy":
                    assert "healthcheck" in services.get(target, {}), f"{name} -> {target}"


def test_flower_and_the_publisher_use_the_light_image_without_trainers(services):
    for name in ("flower", "publisher"):
        assert services[name]["build"]["args"]["EXTRAS"] == "", name
    assert argv(services["flower"]["command"])[:4] == ["celery", "-A", "tasks", "flower"]
    assert argv(services["publisher"]["command"])[:2] == ["fleet", "publish"]
    assert services["publisher"]["profiles"] == ["tools"]
    assert any(str(v).startswith("./examples:") for v in services["publisher"]["volumes"])


# --- a fleet that runs as shipped: auth, persistence, pinned images, health -----------

DOCKERFILE = REPO_ROOT / "Dockerfile"
ENV_EXAMPLE = REPO_ROOT / ".env.example"
PINNED_TAG = re.compile(r":(\d+\.\d+\.\d+[\w.-]*|RELEASE\.[\w.-]+)$")


def named_volume_at(compose: dict, service: dict, target: str) -> str | None:
    for v in service.get("volumes", []):
        src, _, dst = str(v).partition(":")
        if src in (compose.get("volumes") or {}) and dst.split(":")[0] == target:
            return src
    return None


def test_redis_loads_the_role_users_its_acl_service_writes_with_fleet_acl(services):
    args = argv(services["redis"]["command"])
    assert "--requirepass" not in args, (
        "the aclfile's default user has the administrator's password"
    )
    aclfile = args[args.index("--aclfile") + 1]
    init = services["redis-acl"]
    assert f"fleet acl --aclfile {aclfile}" in " ".join(argv(init["command"]))
    assert (
        services["redis"]["depends_on"]["redis-acl"]["condition"]
        == "service_completed_successfully"
    )
    folder = str(Path(aclfile).parent)
    mounted = {
        name: {
            str(v).split(":")[0]
            for v in services[name]["volumes"]
            if str(v).split(":")[1] == folder
        }
        for name in ("redis", "redis-acl")
    }
    assert mounted["redis"] and mounted["redis"] == mounted["redis-acl"], mounted
    runtime = DOCKERFILE.read_text()
    assert re.search(rf"mkdir -p [^\n]*{folder}\b", runtime) and re.search(
        rf"chown [^\n]*{folder}\b", runtime
    ), f"{folder} must exist and belong to the fleet user, which writes the aclfile there"
    admin = environment(init)["FLEET_ACL_ADMIN_PASSWORD"]
    assert INTERPOLATION.match(admin) and environment(services["redis"])["REDISCLI_AUTH"] == admin


@pytest.mark.parametrize(
    "name, role",
    [
        ("worker-cpu", "worker"),
        ("worker-cuda", "worker"),
        ("worker-cuda-large", "worker"),
        ("worker-gpu", "worker"),
        ("flower", "readonly"),
        ("publisher", "operator"),
    ],
)
def test_each_service_logs_in_to_redis_as_its_role_with_the_password_the_aclfile_has(
    services, name, role
):
    from state.acl import PASSWORD_VARS, USERS, Role

    password = environment(services["redis-acl"])[PASSWORD_VARS[Role(role)].name]
    assert INTERPOLATION.match(password), f"{role}'s password must come from the environment"
    env = environment(services[name])
    for key in ("FLEET_BROKER_URL", "FLEET_RESULT_BACKEND"):
        assert env[key].startswith(f"redis://{USERS[Role(role)]}:{password}@redis:6379/"), (
            f"{name}.{key}"
        )


def test_every_image_pulled_from_a_registry_is_pinned_to_a_version(services):
    for name, svc in services.items():
        if "build" not in svc:
            assert PINNED_TAG.search(svc["image"]), (
                f"{name}: {svc['image']} is not pinned to a version"
            )
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M).group(1)
    assert PINNED_TAG.search(base), f"Dockerfile base image {base} is not pinned"


@pytest.mark.parametrize(
    "name",
    ["redis", "minio", "flower", "worker-cpu", "worker-cuda", "worker-cuda-large", "worker-gpu"],
)
def test_every_long_running_service_has_a_healthcheck(services, name):
    check = services[name].get("healthcheck") or {}
    assert check.get("test") and not check.get("disable"), name


def test_flower_asks_for_a_password_listens_in_its_container_and_keeps_its_history(
    compose, services
):
    svc = services["flower"]
    env = environment(svc)
    assert INTERPOLATION.match(env["FLOWER_BASIC_AUTH"]) and ":" in resolve_defaults(
        env["FLOWER_BASIC_AUTH"]
    )
    assert "FLOWER_UNAUTHENTICATED" not in env
    assert env["FLOWER_ADDRESS"] == "0.0.0.0"
    args = argv(svc["command"])
    assert "--persistent=True" in args
    db = next(a.split("=", 1)[1] for a in args if a.startswith("--db="))
    assert named_volume_at(compose, svc, str(Path(db).parent)), f"{db} is not on a named volume"
    assert all(p.startswith("127.0.0.1:") for p in svc["ports"]), (
        "published on the host's loopback only"
    )


def test_the_image_ships_flowerconfig_in_the_working_directory_flower_starts_in():
    text = DOCKERFILE.read_text()
    runtime = text[text.index("AS runtime") :]
    workdir = re.findall(r"^WORKDIR (\S+)$", runtime, re.M)[-1]
    assert re.search(
        rf"^COPY\b.*\bflowerconfig\.py {re.escape(workdir)}(/flowerconfig\.py|/)?$", runtime, re.M
    )
    for path in ("/data", "/work"):
        assert re.search(rf"mkdir -p [^\n]*{path}\b", runtime) and re.search(
            rf"chown [^\n]*{path}\b", runtime
        ), f"{path} must exist and belong to the fleet user (a named volume copies its owner)"


@pytest.mark.parametrize("name", ["worker-cpu", "worker-cuda", "worker-cuda-large", "worker-gpu"])
def test_each_worker_has_a_stable_hostname_and_keeps_its_work_dir_on_a_volume(
    compose, services, name
):
    svc = services[name]
    env = environment(svc)
    assert svc["hostname"] == env["FLEET_HOSTNAME"] == name
    assert named_volume_at(compose, svc, env["FLEET_WORK_DIR"]), (
        f"{name}: FLEET_WORK_DIR not on a named volume"
    )
    assert not any("examples" in str(v) for v in svc.get("volumes", [])), (
        f"{name} mounts examples/: job data reaches workers through the store"
    )


def test_env_example_names_every_variable_the_compose_file_reads(compose):
    used = {
        m.group("var")
        for _, text in walk_strings(compose)
        for m in ANY_INTERPOLATION.finditer(text)
    }
    listed = {
        line.split("=", 1)[0]
        for line in ENV_EXAMPLE.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    }
    assert used <= listed, f"missing from .env.example: {sorted(used - listed)}"
