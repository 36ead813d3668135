"""Obtaining the real models of the catalog (config/catalog.py), only when the user asks."""
