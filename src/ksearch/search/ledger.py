"""The run's LLM ledger: what the proposer's calls counted against the token and USD caps, kept exact across kills.

Before each request the policy announces the call with its bound (its prompt and max_tokens, priced); the bound is
committed to the run's meta (`llm_call_in_flight`). When the call ends, its record, the ledger (`llm_usage`) and
the removal of that mark are one commit. A process killed during a call leaves the mark behind: the next start
of the run (`--resume`) counts that call at its bound (`lost_calls`), so the resumed caps miss nothing.

llm_usage: tokens_in, tokens_out, cost_usd (counted), calls, retries, failed_calls, lost_calls, and, when a reply
claimed more than its bound and broke a cap, `stop_note` and the `claimed_*` totals it was not counted at.
"""

from __future__ import annotations

from typing import Any

from ksearch.policy.base import CallBound, CallRecord
from ksearch.store import RunStore

IN_FLIGHT = "llm_call_in_flight"
EMPTY: dict[str, Any] = {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "calls": 0, "retries": 0,
                         "failed_calls": 0, "lost_calls": 0}


def usage(store: RunStore) -> dict[str, Any]:
    return {**EMPTY, **(store.get_meta("llm_usage") or {})}


def begin_call(store: RunStore, bound: CallBound) -> None:
    """Committed before the request goes out (the store is in autocommit outside a transaction)."""
    store.set_meta(IN_FLIGHT, bound.to_json())


def record_call(store: RunStore, round_: int, call: CallRecord) -> None:
    """The call's record and what it counts, replacing its in-flight mark, in one commit."""
    with store.transaction():
        store.add_call(round_, call)
        u = usage(store)
        tokens_in, tokens_out, cost = call.counted or (call.tokens_in, call.tokens_out, call.cost_usd)
        u["tokens_in"] += tokens_in
        u["tokens_out"] += tokens_out
        u["cost_usd"] += cost
        u["calls"] += 1
        u["retries"] += call.retries
        u["failed_calls"] += 1 if call.error else 0
        if call.counted is not None:
            u["claimed_tokens"] = u.get("claimed_tokens", 0) + call.tokens_in + call.tokens_out
            u["claimed_cost_usd"] = u.get("claimed_cost_usd", 0.0) + call.cost_usd
            u["stop_note"] = call.note
        store.set_meta("llm_usage", u)
        store.delete_meta(IN_FLIGHT)


def recover_lost_call(store: RunStore, round_: int) -> dict[str, Any] | None:
    """A call its process did not live to record counts at its bound (one commit); returns its bound, if any."""
    bound = store.get_meta(IN_FLIGHT)
    if not isinstance(bound, dict):
        return None
    with store.transaction():
        u = usage(store)
        u["tokens_in"] += int(bound.get("tokens_in") or 0)
        u["tokens_out"] += int(bound.get("tokens_out") or 0)
        u["cost_usd"] += float(bound.get("cost_usd") or 0.0)
        u["lost_calls"] += 1
        store.set_meta("llm_usage", u)
        store.add_event(round_, "call_lost", {**bound, "message": f"the {bound.get('role')} call in flight when the "
                                              "run's process ended: counted at its bound"})
        store.delete_meta(IN_FLIGHT)
    return bound
