"""Real models by a short name: what the catalog holds (models.py) and fetching them (fetch.py),
only when the user asks."""
