"""The tests' prompts: one the router classes as code, one as prose."""

CODE_PROMPT = "def parse(path):\n    with open(path) as f:\n        return"
PROSE_PROMPT = "The module provides a way of using the operating system and its files."

CONVERSATION = ("def add(a, b):", "now make it subtract", "and multiply")
"""A follow-up conversation: each turn rewrites the last answer."""
