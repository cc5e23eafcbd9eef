"""worker function."""
