"""Tier 2: CUDA IPC (the transport over a CPU stand-in backend, ledger, handle cache, fields);
no dora dataflow."""
