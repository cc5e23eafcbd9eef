"""Adapters of the self-hosted shape that the core must not import (uvicorn)."""
