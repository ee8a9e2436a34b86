"""The wire format: what one message is, and the receiver's checks of it. docs/wire-format.md is
its specification; the table at its top names the module here that holds each section, and why
the package rests only on ``tensor_codec.errors`` (tests/codec/test_import_layers.py holds it to that).
"""
