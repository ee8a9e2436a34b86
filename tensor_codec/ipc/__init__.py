"""Same-machine inter-process plumbing for the CUDA IPC transport: the release ledger and the
identity of hosts and GPUs. Importing this never initialises CUDA."""
