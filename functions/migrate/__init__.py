"""migrate function."""
