"""The `treadle` command."""
