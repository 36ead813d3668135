"""GGUF files (llama.cpp's format) as mlx-lm model folders, converted once and cached by content."""

from specplay.backends.mlx.gguf.cache import converted_folder, default_cache_dir

__all__ = ["converted_folder", "default_cache_dir"]
