"""The demo project that mounts the ``memory`` app, configured by environment variables."""
