"""`specplay bench`: sweeps, with the methodology and arithmetic of the report."""
