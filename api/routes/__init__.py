"""HTTP routes: thin handlers over the bus and the fold."""
