"""Reusable dora nodes built on tensor_codec (installed as the `tensor_codec_nodes` package).

Each node is a sub-package with a thin `main()` (its console script), a pure `load_config(env)`
and a per-event handler that is tested without a daemon, plus a `dora-node.yml` manifest:

- `camera_source`: frames as `tv_tensors.Image` (synthetic test pattern, V4L2/USB camera, video
  file or image folder), console script `tc-camera-source`;
- `tensor_sender`: a verification suite, random load or a `.safetensors` file, `tc-tensor-sender`;
- `tensor_receiver`: restores, verifies and reports, `tc-tensor-receiver`.

Importing the package changes nothing in the process (its environment included): what a node
process needs before torch loads is set by the node's console script (`common.loop.console_main`).
"""
