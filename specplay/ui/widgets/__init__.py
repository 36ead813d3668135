"""The playground's widgets: each shows one thing and reports the user's actions as messages."""
