"""spate workers: consume request events, run the model, publish token and lifecycle events."""
