"""The judging procedure: plan, prompts rendered into conversations, checks, the rule, results."""
