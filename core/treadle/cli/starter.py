"""The starter configuration `treadle init` writes."""

STARTER_YAML = """\
# treadle.yaml — operator configuration. Keys follow loomcycle's where they exist.
# Agents run on the deterministic mock provider until real providers are configured.
agents:
  demo:
    provider: mock
    model: tool-caller          # calls its first tool `tool_calls` times, then answers
    description: Counts its own calls in Memory, then reports.
    system_prompt: You are a careful assistant.
    tools: [Memory, Context]
    max_iterations: 16
    mock:
      tool_calls: 3
      latency_ms: 250           # slow enough to watch
      jitter_ms: 100

  echo:
    provider: mock
    model: echo                 # answers with the last user text

  scripted:
    provider: mock
    model: script               # plays mock.script, one turn per iteration
    tools: [Context, Memory]
    mock:
      latency_ms: 150
      script:
        - tool: Context
          input: {op: time}
        - tool: Memory
          input: {op: set, scope: agent, key: greeting, value: hello}
        - tool: Memory
          input: {op: get, scope: agent, key: greeting}
        - text: I looked at the clock and remembered a greeting.
"""
