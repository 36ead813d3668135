"""Remote backend over vLLM's OpenAI-compatible HTTP API (vLLM 0.32 and 0.33). Inspection mode runs
specplay's own round loop against servers; native mode watches vLLM's own speculation."""

from specplay.backends.vllm.errors import VllmError
from specplay.backends.vllm.vllm_backend import VllmBackend, connect_vllm_backend

__all__ = ["VllmBackend", "VllmError", "connect_vllm_backend"]
