"""What keeps a replica within its bounds: admission (open responses per replica and key),
the drain on shutdown, the counts and sizes a request may hand the worker, and the HTTP
server's own limits."""
