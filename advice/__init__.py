"""Advice: the recommended vLLM command per server and the upgrade planner."""
