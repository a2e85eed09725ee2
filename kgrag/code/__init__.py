"""The project's own code read as data: its import graph (DVC deps) and code versions (cache keys)."""
