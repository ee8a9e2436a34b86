"""The transports' names, defined once: what ``tc.transport`` may say and what `send` accepts.

Importing this module loads no transport (no CUDA code)."""

HOST = "host"
CUDA_IPC = "cuda-ipc"
AUTO = "auto"

NAMES = (HOST, CUDA_IPC)  # what a message's ``tc.transport`` may name
CHOICES = (AUTO, *NAMES)  # what a sender may ask for (auto: routing.py picks one of NAMES)
