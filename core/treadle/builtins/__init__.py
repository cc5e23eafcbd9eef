"""The built-in tools and the default registry."""
