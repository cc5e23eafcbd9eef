"""Principals and bearer authentication."""
