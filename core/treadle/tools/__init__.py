"""Tools: the Tool port, the registry, default-deny policy and the built-ins."""
