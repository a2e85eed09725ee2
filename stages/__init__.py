"""DVC stage entry points: read params, do I/O, call kgrag. Run as ``python -m stages.<name>``."""
