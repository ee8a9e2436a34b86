"""Tensor sender node: a verification suite, random load or a .safetensors file, numbered and
checksummed, through tensor_codec."""
