"""scheduler function."""
