"""Camera source node: frames as `tv_tensors.Image` (uint8, CHW) through tensor_codec."""
