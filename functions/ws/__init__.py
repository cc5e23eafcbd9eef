"""ws function."""
