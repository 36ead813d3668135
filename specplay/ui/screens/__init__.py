"""The playground's screens."""
