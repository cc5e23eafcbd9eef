"""Model providers: the Provider port and its drivers (only `mock` in this build)."""
