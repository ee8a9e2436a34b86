"""The tensor sender's delivery schedule: `Delivery` (messages 0..total-1, a window of
unacknowledged ones, retransmission and giving up). It lives in ../common/delivery.py, shared with
the camera and the JPEG nodes; that module's docstring says why dora needs it and how it works."""

from __future__ import annotations

from ..common.delivery import Delivery

__all__ = ["Delivery"]
