"""Learned routing: the scores a session's counterfactual rounds give each drafter, training a
router on them and evaluating it beside the heuristic, and the router file. The classifier itself
is the engine's (engine/routers/learned.py)."""
