"""The wire format: what one message is, and the receiver's checks of it. docs/wire-format.md is
its specification; the table at its top names the module here that holds each section.

The package rests only on ``tensor_codec.errors`` (tests/codec/test_import_layers.py): it says
what a message is, never how one is made or moved.
"""
