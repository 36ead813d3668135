"""Fidelity: what speculative decoding with a TV budget gives up for its speed."""
