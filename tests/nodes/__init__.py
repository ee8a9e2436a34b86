"""Tier 3: the nodes and the tools, in process with fakes (camera, JPEG engines and nodes, sender,
receiver, rerun sink, settings, delivery, the installer's and gpu-check's logic, plots); no dora
dataflow."""
