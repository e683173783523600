"""Minimal attention models trained on synthetic sequences, all seeds batched, to test the theory."""
