"""rerun-sdk, the optional extra this node records with: is it there, and how to get it.

Imported before anything of rerun's, so a missing or broken SDK is one clear line, never a
traceback from deep inside the node.
"""

from __future__ import annotations

import importlib
from typing import Any

MINIMUM = "0.41"  # the release this node is built and tested against (its reading API included)
INSTALL = (
    f"pip install 'rerun-sdk>={MINIMUM}' into the node's environment (in a checkout: pip install -e '.[rerun]'; "
    "`make install` installs it where it can be had)"
)


def missing() -> str | None:
    """None when rerun-sdk imports; otherwise why not, with how to install it."""
    try:
        importlib.import_module("rerun")
    except ImportError as e:
        return f"rerun-sdk is not installed ({e}): {INSTALL}"
    except Exception as e:  # a broken install: say what it raised, not a traceback
        return f"rerun-sdk does not import ({type(e).__name__}: {str(e)[:200]}): {INSTALL}"
    return None


def open_recording(app_id: str, file: str | None, viewer: str | None) -> Any:
    """A recording stream writing to `file` (an .rrd) and/or streaming to the viewer at `viewer`
    (a rerun+http:// URL). Its own stream, not rerun's global one: a node may run beside other
    rerun users in one process (tests)."""
    import rerun as rr

    recording = rr.RecordingStream(application_id=app_id)
    sinks = []
    if file is not None:
        sinks.append(rr.FileSink(file))
    if viewer is not None:
        sinks.append(rr.GrpcSink(viewer))
    recording.set_sinks(*sinks)
    return recording
