"""Knowledge an agent builds on (issue 41): SQL memory (per-scope Postgres schemas under roles
that reach nothing else, store/sqlmem.py), and — later — the Path tree and Documents."""
