"""Tier 1: the format and the codec (wire, golden bytes, fuzzing, validation, structures,
tv_tensors, lifetimes, routing, send with a fake node); no dora dataflow."""
