"""Tests of the model layer: loading, tokenization, templates and the forward pass."""
