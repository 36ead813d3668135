"""How runs look, shared by the terminal, the playground and exported transcripts."""
