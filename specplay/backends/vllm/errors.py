"""The vLLM backend's errors: each names the server and what to do."""

from __future__ import annotations

from specplay.errors import SpecplayError


class VllmError(SpecplayError):
    """A vLLM server that cannot be reached, answered with an error, or lacks a needed feature."""
