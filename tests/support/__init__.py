"""Helpers shared by the tests (imported as `tests.support.<module>`; no test imports another test
module): dora dataflow runs (dora.py), waiting with a deadline (waiting.py), the fake dora node
(fakes.py), the CPU stand-in for the CUDA IPC backend (ipc_fake_backend.py), JPEG references
(jpeg.py), reading rerun recordings (rerun.py), and the optional packages: skips where one does
not import (optional.py), an interpreter without them (without_optional/sitecustomize.py)."""
