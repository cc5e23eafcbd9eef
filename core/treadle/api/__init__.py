"""The HTTP API: FastAPI app factory and routers (each Lambda mounts the routers it serves)."""
