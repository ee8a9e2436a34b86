"""This process's GPUs (tensor_codec/gpus.py), below the transports: the host transport and the
send pipeline ask it which GPU a UUID names, not the CUDA IPC transport. A stand-in source (its
"GPU" memory CPU memory) drives it without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tensor_codec as tc
from tensor_codec import gpus
from tensor_codec.plan import make_plan
from tensor_codec.wire.header import KEY_HEADER

ROOT = Path(__file__).resolve().parents[2]
SEEN = "GPU-00000000-1111-2222-3333-444444444444"
UNSEEN = "GPU-99999999-1111-2222-3333-444444444444"


class StandIn:
    """Two "GPUs": tensors of dtype int16 are on the second, other tensors on the first."""

    def __init__(self):
        self.gpus = [SEEN, "GPU-aaaaaaaa-0000-0000-0000-000000000000"]
        self.asked: list[str] = []

    def gpu_uuid(self, index):
        return self.gpus[index]

    def local_index(self, uuid):
        self.asked.append(uuid)
        return self.gpus.index(uuid) if uuid in self.gpus else None

    def visible_gpus(self):
        return list(self.gpus)

    def torch_device(self, index):
        return torch.device("cpu")

    def device_index_of(self, t):
        return 1 if t.dtype == torch.int16 else 0


@pytest.fixture
def stand_in():
    source = StandIn()
    gpus.use(source)
    yield source
    gpus.use(None)


def _host_message_naming(gpu: str):
    value, metadata = tc.encode(torch.arange(6, dtype=torch.int32))
    header = metadata[KEY_HEADER]
    return value, {**metadata, KEY_HEADER: header[:-1] + f',"gpu":"{gpu}"' + "}"}


def test_the_gpu_of_a_message_is_named_by_uuid(stand_in):
    assert gpus.gpu_of(make_plan({"a": torch.zeros(3), "b": torch.ones(2)})) == SEEN
    assert gpus.gpu_of(make_plan(torch.zeros(3, dtype=torch.int16))) == stand_in.gpus[1]


def test_tensors_on_two_gpus_are_refused_naming_both_paths(stand_in):
    with pytest.raises(tc.EncodeError, match=r"mixed GPUs at `\$\.b`.*cuda:1 here and cuda:0 at `\$\.a`"):
        gpus.gpu_of(make_plan({"a": torch.zeros(3), "b": torch.zeros(3, dtype=torch.int16)}))


def test_host_bytes_naming_a_gpu_are_restored_through_this_processs_gpus(stand_in):
    value, metadata = _host_message_naming(SEEN)
    assert tc.decode(value, metadata).tolist() == list(range(6))
    assert stand_in.asked == [SEEN]
    tc.decode(value, metadata)
    assert stand_in.asked == [SEEN]  # learned once


def test_a_gpu_this_process_cannot_see_is_named_and_not_kept(stand_in):
    value, metadata = _host_message_naming(UNSEEN)
    for _ in range(2):
        with pytest.raises(tc.DecodeError, match=rf"tc\.header\.gpu: .*{UNSEEN}, which this process cannot see"):
            tc.decode(value, metadata)
    assert UNSEEN not in gpus.current().index_of_uuid and stand_in.asked == [UNSEEN, UNSEEN]


@pytest.mark.slow  # a fresh interpreter
def test_host_bytes_naming_a_gpu_never_load_the_cuda_ipc_transport():
    """The host transport finds the GPU a header names in gpus.py: the CUDA IPC transport, its
    ledger and backend stay unloaded."""
    code = (
        "import json, sys, torch, tensor_codec as tc\n"
        "from tensor_codec import gpus\n"
        "from tensor_codec.wire.header import KEY_HEADER\n"
        "from tests.codec.test_gpus import SEEN, StandIn\n"
        "gpus.use(StandIn())\n"
        "v, m = tc.encode(torch.arange(6, dtype=torch.int32))\n"
        "m = {**m, KEY_HEADER: m[KEY_HEADER][:-1] + ',\"gpu\":\"' + SEEN + '\"}'}\n"
        "assert tc.decode(v, m).tolist() == list(range(6))\n"
        "print(json.dumps(sorted(n for n in sys.modules if n.startswith('tensor_codec.cuda_ipc.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
