"""Helpers shared by the tests: databases, fake vendors and servers, signing, the imitated Lambda,
and the small builders each area's tests use. Tests import them from here (`tests.support.…`);
conftest.py files hold only fixtures and are never imported by name."""
