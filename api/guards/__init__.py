"""What keeps a replica within its bounds: admission (open responses per replica and key),
each key's rate limits (shared by every replica), the drain on shutdown, the counts and
sizes a request may hand the worker, and the HTTP server's own limits."""
