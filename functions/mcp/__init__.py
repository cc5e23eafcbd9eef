"""mcp function."""
