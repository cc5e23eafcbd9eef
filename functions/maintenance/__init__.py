"""maintenance function."""
