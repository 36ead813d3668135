"""The run configuration: typed, built once at a command's edge, validated by pure functions."""
