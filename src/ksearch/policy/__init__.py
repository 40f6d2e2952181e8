"""Who proposes: the policy protocol, the offline proposer, the LLM policy."""
