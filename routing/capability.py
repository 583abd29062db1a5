"""What a host has: a frozen value object, plus pure ways to combine and override it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from core.errors import CapabilityError
from core.registry import FLEET_CAPABILITY, FLEET_HOSTNAME

OVERRIDE_KEYS = ("hostname", "cpu_cores", "ram_total_gib", "ram_available_gib", "cuda_devices")


@dataclass(frozen=True)
class CudaDevice:
    """One CUDA device as NVML (or an override) reports it."""

    index: int
    name: str
    vram_total_gib: float
    vram_free_gib: float
    compute_capability: str | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class Capability:
    """A host's detected (or overridden) resources and versions."""

    hostname: str
    cpu_cores: int
    ram_total_gib: float
    ram_available_gib: float
    cuda_devices: tuple[CudaDevice, ...] = ()
    driver_version: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    git_commit: str | None = None
    overridden: tuple[str, ...] = ()  # keys replaced by FLEET_CAPABILITY / FLEET_HOSTNAME
    # what detection could not find out, for the operator (worker log, fleet capability, hosts)
    warnings: tuple[str, ...] = ()

    @property
    def max_vram_gib(self) -> float:
        return max((d.vram_total_gib for d in self.cuda_devices), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cuda_devices"] = [asdict(x) for x in self.cuda_devices]
        d["overridden"] = list(self.overridden)
        d["warnings"] = list(self.warnings)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Capability:
        d = dict(d)
        d["cuda_devices"] = tuple(CudaDevice(**x) for x in d.get("cuda_devices", ()))
        d["overridden"] = tuple(d.get("overridden", ()))
        d["warnings"] = tuple(d.get("warnings", ()))
        return cls(**d)


def nvml_warning(error: str, evidence: list[str]) -> str | None:
    """What to tell the operator when NVML did not start (``error``) on a host where NVIDIA
    devices or a driver are present (``evidence``: their paths); None where there are none
    (a CPU host, whose NVML fails as it should)."""
    if not evidence:
        return None
    return (
        f"NVML failed to start ({error}) although {', '.join(evidence[:3])} "
        f"{'is' if len(evidence) == 1 else 'are'} present: this host's GPUs are not "
        "detected, so it serves as a CPU host; check the NVIDIA driver (nvidia-smi) and "
        "that libnvidia-ml.so.1 can be loaded (in a container: the NVIDIA runtime)"
    )


def parse_override(raw: str) -> dict[str, Any]:
    """Read FLEET_CAPABILITY: inline JSON, or a path to a JSON file."""
    text = raw.strip()
    source = "FLEET_CAPABILITY"
    if not text.startswith("{"):
        source = f"FLEET_CAPABILITY file {text}"
        try:
            with open(text, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise CapabilityError(
                f"{source}: cannot read ({e.strerror}); "
                "set it to inline JSON or a readable JSON file"
            ) from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CapabilityError(f"{source}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise CapabilityError(
            f"{source}: must be a JSON object with keys {', '.join(OVERRIDE_KEYS)}"
        )
    unknown = sorted(set(data) - set(OVERRIDE_KEYS))
    if unknown:
        raise CapabilityError(
            f"{source}: unknown key(s) {unknown}; known keys: {', '.join(OVERRIDE_KEYS)}"
        )
    return data


def _number(key: str, value: Any, kind: type) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise CapabilityError(
            f"FLEET_CAPABILITY: {key} must be a non-negative number, got {value!r}"
        )
    return kind(value)


def apply_override(cap: Capability, override: dict[str, Any]) -> Capability:
    """Replace detected values with the keys given; keys left out keep detected values."""
    changes: dict[str, Any] = {}
    for key, given in override.items():
        if key == "cuda_devices":
            if not isinstance(given, list):
                raise CapabilityError(
                    f"FLEET_CAPABILITY: cuda_devices must be a list of "
                    f'{{"name", "vram_total_gib"}} objects ([] for none), got {given!r}'
                )
            devices = []
            for i, dev in enumerate(given):
                try:
                    total = float(dev["vram_total_gib"])
                    devices.append(
                        CudaDevice(
                            index=i,
                            name=str(dev.get("name", f"simulated-{i}")),
                            vram_total_gib=total,
                            vram_free_gib=float(dev.get("vram_free_gib", total)),
                            compute_capability=dev.get("compute_capability"),
                            uuid=dev.get("uuid"),
                        )
                    )
                except (KeyError, TypeError, ValueError) as e:
                    raise CapabilityError(
                        f"FLEET_CAPABILITY: cuda_devices[{i}] needs a number vram_total_gib ({e})"
                    ) from e
            changes[key] = tuple(devices)
            changes["warnings"] = ()  # the devices are declared: what NVML could not tell is moot
        elif key == "hostname":
            changes[key] = str(given)
        else:
            changes[key] = _number(key, given, int if key == "cpu_cores" else float)
    if "ram_total_gib" in changes and "ram_available_gib" not in changes:
        # a simulated smaller host cannot have more free RAM than it has in all
        changes["ram_available_gib"] = min(cap.ram_available_gib, changes["ram_total_gib"])
    overridden = tuple(sorted(set(cap.overridden) | set(changes) - {"warnings"}))
    return replace(cap, **changes, overridden=overridden)


def restrict(cap: Capability, declared: dict[str, Any]) -> Capability:
    """Combine detected and declared capability: the more restrictive value wins."""
    if not declared:
        return cap
    changes: dict[str, Any] = {}
    for key in ("cpu_cores", "ram_total_gib", "ram_available_gib"):
        if key in declared:
            changes[key] = type(getattr(cap, key))(min(getattr(cap, key), declared[key]))
    if "cuda_devices" in declared:
        limits = declared["cuda_devices"]
        devices = []
        # a declared list shorter than detected hides devices
        for dev, lim in zip(cap.cuda_devices, limits, strict=False):
            total = min(dev.vram_total_gib, float(lim.get("vram_total_gib", dev.vram_total_gib)))
            devices.append(
                replace(dev, vram_total_gib=total, vram_free_gib=min(dev.vram_free_gib, total))
            )
        changes["cuda_devices"] = tuple(devices)
    return replace(cap, **changes)


def from_environment(cap: Capability, env: dict[str, str] | None = None) -> Capability:
    """Apply FLEET_CAPABILITY then FLEET_HOSTNAME from the environment."""
    override, hostname = FLEET_CAPABILITY.value(env), FLEET_HOSTNAME.value(env)
    if override:
        cap = apply_override(cap, parse_override(override))
    if hostname:
        cap = apply_override(cap, {"hostname": hostname})
    return cap
