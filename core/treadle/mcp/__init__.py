"""MCP servers as agent tools (the client side; the server side is treadle.api.mcp).

    credentials   per-run credentials: sealed at rest, substituted into headers at the transport
    transport     the network guard (security/network.py) for the SDK's HTTP client
    connections   pooled SDK client sessions per process: lazy (re)connect, timeouts
    tools         `mcp__<server>__<tool>` tools and the per-step source the engine asks for them
    defs          MCPServerDef on the shared def lifecycle (discover at create; rediscover)

Layer: above treadle.defs (MCPServerDef is a def kind), below triggers (the `mcp.call` hook) and
builtins/runtime, which wire it; the engine sees only a callable (engine/step.py `McpTools`).
"""
