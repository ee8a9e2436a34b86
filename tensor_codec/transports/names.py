"""The transports' names, defined once: what a header's ``transport`` may say and what `send` accepts.

Importing this module loads no transport (no CUDA code)."""

HOST = "host"
CUDA_IPC = "cuda-ipc"
AUTO = "auto"

# Not a wire name: host bytes whose receivers restore them onto the GPU the sender's tensors were
# on, as CUDA IPC would have delivered them (routing.py picks it for messages under
# TC_IPC_MIN_BYTES; the message says ``host`` with the GPU in its header).
HOST_TO_GPU = "host-to-gpu"

NAMES = (HOST, CUDA_IPC)  # what a message header's ``transport`` may name
CHOICES = (AUTO, *NAMES)  # what a sender may ask for (auto: routing.py picks one of NAMES)
