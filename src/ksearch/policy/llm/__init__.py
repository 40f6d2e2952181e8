"""The LLM policy: K-Search's reasoning with any OpenAI-compatible model.

    from ksearch.policy.llm import make_policy
    policy = make_policy(cfg.llm)                                   # live, against the configured endpoint
    policy = make_policy(cfg.llm, replay=store.calls())             # replay a run's recorded answers, offline
    # ... and stop at the first differing prompt
    policy = make_policy(cfg.llm, replay=calls, strict_prompts=True)

Importing this package imports neither `openai` nor `jinja2`: machines that only run candidates have neither.
"""

from ksearch.errors import CallFailed, LLMConfigError, ReplayMismatch
from ksearch.policy.llm.factory import make_policy
from ksearch.policy.llm.policy import LLMPolicy
from ksearch.policy.llm.presets import PRESETS, Preset

__all__ = ["PRESETS", "CallFailed", "LLMConfigError", "LLMPolicy", "Preset", "ReplayMismatch", "make_policy"]
