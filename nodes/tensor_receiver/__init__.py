"""Tensor receiver node: restores every message, verifies it, counts, times and reports."""
