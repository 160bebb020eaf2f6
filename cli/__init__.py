"""The `spate` command: serve (everything on one machine), api, and worker."""
