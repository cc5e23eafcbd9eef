"""Tool-use hooks: the operator's HTTP callbacks around agents' tool calls (loomcycle's /v1/hooks)."""
