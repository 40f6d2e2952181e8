"""Hardware profiles: the one loader of data/hardware.yaml (bandwidth, peaks, limits per device) and the match of a
detected device to its row. The knowledge layer reads the table through `load_profiles` too."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import psutil
import yaml

DATA = Path(__file__).resolve().parent / "data"
PROFILES_FILE = DATA / "hardware.yaml"
PROFILES_SCHEMA = DATA / "hardware.schema.json"


@functools.cache
def _data() -> dict[str, Any]:
    return dict(yaml.safe_load(PROFILES_FILE.read_text()))


def load_profiles() -> list[dict[str, Any]]:
    return list(_data()["profiles"])


def emulated_profile(backend: str, llc_bytes: int | None = None) -> dict[str, Any]:
    """The profile of an emulated device (data/hardware.yaml, `emulators`): its limits, and for the timing pools the
    cache of the device the emulation runs on (`llc_bytes`; default this CPU's). No bandwidth and no peak: an
    emulator's time is no measure of the emulated device, so no physical floor applies and no roofline fraction is
    reported."""
    for row in _data().get("emulators", []):
        if row.get("backend") == backend:
            out = dict(row)
            out.update({"llc_bytes": llc_bytes or cpu_llc_bytes(), "bandwidth_gbs": None, "peak_tflops": {}, "matched": True,
                        "emulated": True})
            return out
    raise KeyError(f"no emulator profile for backend {backend!r} in {PROFILES_FILE.name}")


def cpu_llc_bytes() -> int:
    """Last-level cache of this CPU from sysfs (timing pools must exceed twice this)."""
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in base.glob("index*"):
        try:
            size = (idx / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        num = size[:-1] if size[-1:] in "KMG" else size
        if num.isdigit():
            best = max(best, int(num) * mult)
    return best or (32 << 20)


def match_profile(name: str, family: str) -> dict[str, Any] | None:
    lowered = name.lower()
    candidates = [p for p in load_profiles() if p.get("vendor") == ("apple" if family == "metal" else "nvidia")]
    # Longest pattern first, so "M3 Max" wins over "M3".
    pairs = sorted(((pat, p) for p in candidates for pat in p.get("match", [])), key=lambda t: -len(t[0]))
    for pat, prof in pairs:
        if pat.lower() in lowered:
            return prof
    return None


def profile_for(family: str, name: str) -> dict[str, Any]:
    """The profile of a device of `family` (cpu, cuda, metal) named `name` as the backend reports it."""
    if family == "cpu":
        return {
            "id": "cpu", "name": name or "CPU", "vendor": "cpu", "llc_bytes": cpu_llc_bytes(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "bandwidth_gbs": None, "peak_tflops": {}, "matched": True,
        }
    prof = match_profile(name, family)
    if prof is None:
        # Unknown GPU: no floor can be claimed, so timings are reported without roofline fractions.
        return {"id": "unknown", "name": name, "vendor": family, "llc_bytes": 64 << 20,
                "bandwidth_gbs": None, "peak_tflops": {}, "matched": False}
    out = dict(prof)
    out["llc_bytes"] = int(prof.get("l2_mb", 64) * (1 << 20))
    if family == "metal" and prof.get("memory_gb"):
        # Unified memory: a chip's profile gives its largest configuration; this machine has what the OS counts.
        out["memory_gb"] = min(float(prof["memory_gb"]), round(psutil.virtual_memory().total / 2**30, 1))
    out["matched"] = True
    out["detected_name"] = name
    return out
