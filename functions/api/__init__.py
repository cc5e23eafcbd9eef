"""api function."""
