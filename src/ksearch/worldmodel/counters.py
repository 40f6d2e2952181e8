"""Named rules that turn a solved node's hardware counters into its impact ratings.

A node's impacts (memory_bandwidth, register_pressure, compute_intensity_and_hw_fit) start as the proposer's guesses.
Once the node's best candidate has been profiled (harness/profile.py), each rule below that holds for its counters
moves the ratings of the node and names the optimisation patterns it makes more or less worth trying next. A
rating then reads as "how much work on this axis is still worth, measured" (5 neutral): DRAM at 85% of peak gives
memory bandwidth a low rating (load optimisations have little left to win), dominant long-scoreboard stalls raise it
and put prefetching (double buffering) first. The node keeps the fired rules under `counter_rules` and the counters'
digest under `counters`; the offline proposer ranks its follow-ups with them (policy/offline.py), the report and the
prompts show them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ksearch.worldmodel.schema import IMPACT_KEYS

Counters = dict[str, Any]  # harness.ncu.summarize's digest, plus "spill_bytes" and "roofline_fraction"

NEUTRAL = 5.0


def _stall(c: Counters, reason: str) -> float:
    return next((float(s["share"]) for s in c.get("stalls") or [] if s.get("reason") == reason), 0.0)


def _top_stall(c: Counters) -> str | None:
    stalls = c.get("stalls") or []
    return str(stalls[0]["reason"]) if stalls else None


def _num(c: Counters, key: str) -> float | None:
    v = c.get(key)
    return float(v) if isinstance(v, int | float) else None


def _second_kernel_share(c: Counters) -> float:
    shares = c.get("kernel_shares") or []
    return float(shares[1]["share"]) if len(shares) > 1 else 0.0


@dataclass(frozen=True)
class CounterRule:
    name: str
    holds: Callable[[Counters], bool]
    says: Callable[[Counters], str]
    effects: dict[str, float]  # impact key -> change of its rating
    boosts: tuple[str, ...] = ()  # patterns worth more after this finding
    lowers: tuple[str, ...] = ()  # patterns worth less


def _ge(key: str, limit: float) -> Callable[[Counters], bool]:
    return lambda c: (_num(c, key) or 0.0) >= limit


RULES: tuple[CounterRule, ...] = (
    CounterRule(
        "dram_saturated", _ge("dram_pct", 85.0),
        lambda c: f"DRAM at {c['dram_pct']:.0f}% of peak: memory bandwidth saturated, load optimisations have little "
                  "left; move fewer bytes instead",
        {"memory_bandwidth": -4.0}, lowers=("vectorized_loads", "double_buffering")),
    CounterRule(
        "memory_latency_bound",
        lambda c: _top_stall(c) == "long_scoreboard" and _stall(c, "long_scoreboard") >= 0.4
        and (_num(c, "dram_pct") or 0.0) < 70.0,
        lambda c: f"long-scoreboard stalls {_stall(c, 'long_scoreboard'):.0%} of all stalls with DRAM below 70%: "
                  "loads wait on memory latency; prefetch (double buffering) and more loads in flight",
        {"memory_bandwidth": +2.0}, boosts=("double_buffering", "vectorized_loads", "split_k_decode_lse_merge")),
    CounterRule(
        "occupancy_limited_by_registers",
        lambda c: c.get("occupancy_limiter") == "registers" and (_num(c, "occupancy_pct") or 100.0) < 35.0,
        lambda c: f"achieved occupancy {c['occupancy_pct']:.0f}% limited by registers",
        {"register_pressure": +3.0}, lowers=("loop_unrolling",)),
    CounterRule(
        "register_spills", lambda c: (_num(c, "spill_bytes") or 0.0) > 0,
        lambda c: f"ptxas spills {c['spill_bytes']:.0f} bytes: registers exhausted",
        {"register_pressure": +3.0}, lowers=("loop_unrolling",)),
    CounterRule(
        "compute_saturated", lambda c: (_num(c, "sm_pct") or 0.0) >= 80.0 or (_num(c, "tensor_pct") or 0.0) >= 70.0,
        lambda c: f"SM at {c.get('sm_pct') or 0:.0f}%, tensor pipe at {c.get('tensor_pct') or 0:.0f}% of peak: "
                  "compute-bound; only cheaper arithmetic or tensor cores help",
        {"compute_intensity_and_hw_fit": +3.0, "memory_bandwidth": -2.0},
        boosts=("tensor_core_mma", "exp2_trick"), lowers=("vectorized_loads",)),
    CounterRule(
        "tensor_pipe_idle",
        lambda c: (_num(c, "sm_pct") or 0.0) >= 50.0 and _num(c, "tensor_pct") is not None
        and (_num(c, "tensor_pct") or 0.0) < 5.0,
        lambda c: f"SM at {c['sm_pct']:.0f}% with the tensor pipe idle: the math runs on the FP32 pipes",
        {"compute_intensity_and_hw_fit": +2.0}, boosts=("tensor_core_mma",)),
    CounterRule(
        "barrier_stalls", lambda c: _stall(c, "barrier") >= 0.3,
        lambda c: f"barrier stalls {_stall(c, 'barrier'):.0%} of all stalls: threads wait at __syncthreads",
        {"compute_intensity_and_hw_fit": +1.0}, boosts=("simd_register_reduction", "multi_row_per_block")),
    CounterRule(
        "extra_launch", lambda c: _second_kernel_share(c) >= 0.15,
        lambda c: f"a second kernel takes {_second_kernel_share(c):.0%} of the call's GPU time",
        {"compute_intensity_and_hw_fit": +1.0}, boosts=("fused_epilogue", "mx_compile_fusion")),
    CounterRule(
        "gpu_underused",
        lambda c: _num(c, "dram_pct") is not None and (_num(c, "dram_pct") or 0.0) < 40.0
        and (_num(c, "sm_pct") or 0.0) < 40.0,
        lambda c: f"DRAM {c['dram_pct']:.0f}% and SM {c.get('sm_pct') or 0:.0f}% of peak: the GPU is underused; "
                  "more parallel work (split the long axis, more blocks)",
        {"memory_bandwidth": +1.0, "compute_intensity_and_hw_fit": +1.0},
        boosts=("split_k_decode_lse_merge", "gqa_head_grouping", "threadgroup_tiling")),
)


def counters_line(c: Counters) -> str:
    """A node's counter digest in one short line (what the world-model prompts quote instead of the whole digest)."""
    def pct(key: str) -> str:
        v = _num(c, key)
        return "-" if v is None else f"{v:.0f}%"

    parts = []
    if _num(c, "dram_pct") is not None or _num(c, "sm_pct") is not None:
        parts.append(f"DRAM {pct('dram_pct')}, L2 {pct('l2_pct')}, SM {pct('sm_pct')}, tensor {pct('tensor_pct')} of "
                     f"peak; occupancy {pct('occupancy_pct')}"
                     + (f" ({c['occupancy_limiter']}-limited)" if c.get("occupancy_limiter") else ""))
    if c.get("stalls"):
        parts.append("stalls " + ", ".join(f"{s['reason']} {float(s['share']):.0%}" for s in c["stalls"]))
    if c.get("kernel_shares") and len(c["kernel_shares"]) > 1:
        parts.append(f"{len(c['kernel_shares'])} kernels, second {_second_kernel_share(c):.0%} of the time")
    if _num(c, "max_registers"):
        parts.append(f"{c['max_registers']} registers, {c.get('spill_bytes') or 0} bytes spilled")
    if _num(c, "roofline_fraction") is not None:
        parts.append(f"roofline fraction {c['roofline_fraction']:.2f}")
    return "; ".join(parts)


@dataclass
class Fired:
    rule: str
    says: str
    boosts: tuple[str, ...]
    lowers: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "says": self.says, "boosts": list(self.boosts), "lowers": list(self.lowers)}


def fire(counters: Counters) -> list[Fired]:
    """The rules that hold for these counters, in RULES order."""
    return [Fired(r.name, r.says(counters), r.boosts, r.lowers) for r in RULES if r.holds(counters)]


def measured_impacts(impacts: dict[str, Any], counters: Counters) -> tuple[dict[str, Any], list[Fired]]:
    """The node's impacts with every fired rule's change applied to a neutral rating (a measurement replaces the
    guess), each changed axis marked `source: counters` with the rules' words in its notes; axes no rule speaks of
    keep their ratings."""
    fired = fire(counters)
    by_rule = {r.name: r for r in RULES}
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in impacts.items()}
    for key in IMPACT_KEYS:
        changes = [(f, by_rule[f.rule].effects[key]) for f in fired if key in by_rule[f.rule].effects]
        if not changes:
            continue
        rating = max(0.0, min(10.0, NEUTRAL + sum(d for _, d in changes)))
        old = out.get(key) if isinstance(out.get(key), dict) else {}
        out[key] = {**(old or {}), "rating_0_to_10": rating, "source": "counters",
                    "rules": [f.rule for f, _ in changes], "notes": "measured: " + "; ".join(f.says for f, _ in changes)}
    return out, fired


def pattern_adjustment(node: dict[str, Any] | None, pattern_id: str, pattern_impacts: dict[str, Any] | None) -> float:
    """How much a node's measured counters move a follow-up pattern's rating (0 without measurements): +3 / -3 for
    each fired rule that names the pattern (its explicit advice), plus, per measured axis, the pattern's own impact on that axis (0-10)
    times how far the measurement moved the axis from neutral, scaled to at most +-2."""
    if not node:
        return 0.0
    delta = 0.0
    for f in node.get("counter_rules") or []:
        if pattern_id in (f.get("boosts") or []):
            delta += 3.0
        if pattern_id in (f.get("lowers") or []):
            delta -= 3.0
    impacts = node.get("impacts") or {}
    for key in IMPACT_KEYS:
        measured = impacts.get(key)
        if not isinstance(measured, dict) or measured.get("source") != "counters":
            continue
        own = (pattern_impacts or {}).get(key) or {}
        weight = float(own.get("rating_0_to_10", NEUTRAL)) / 10.0 if isinstance(own, dict) else 0.5
        delta += weight * (float(measured["rating_0_to_10"]) - NEUTRAL) / NEUTRAL * 2.0
    return delta
