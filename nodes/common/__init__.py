"""Pieces every node shares: settings, device choice, the message protocol, reports."""
