"""The Tool port (Tool, ToolContext, ToolResult, Park) and the registry class; built-ins live in treadle.builtins."""
