"""What the tests and the benchmarks share to drive spate for real: its processes as a user
starts them, tiny checkpoints to load, and waits on a condition with a deadline. Not shipped."""
