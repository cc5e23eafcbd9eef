"""Fake model vendors (Anthropic, OpenAI / DeepSeek / Ollama, Gemini) on loopback HTTP."""
