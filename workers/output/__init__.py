"""Output shaping: what a request's tools and answer format make of the prompt, the
grammar and the engine's tokens, and the events each step publishes to the log. It sits
between the process (workers/*.py) and the engine and model below it."""
