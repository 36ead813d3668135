"""The headless runner: the one thread that owns the models, lanes taking turns on it, and runs
saved as sessions. No UI, no flags: the CLI and the playground both drive it."""
