"""webhook function."""
