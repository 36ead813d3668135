"""specplay: a playground for seeing speculative decoding."""

__version__ = "0.1.0"
