"""Model providers: the Provider port (`base`), the wire drivers (`anthropic`, `openai_chat`,
`gemini`) over shared HTTP/SSE plumbing (`http`), vendor presets (`registry`), and `mock`."""
