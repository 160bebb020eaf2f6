"""spate's HTTP API: validates Responses requests, publishes them, folds their events."""
