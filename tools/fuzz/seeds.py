"""Valid messages the mutators start from, made by ``tc.encode(obj, "host")`` from objects built
deterministically (fixed torch generators), plus CUDA IPC messages whose header and ``tc.ipc.*``
keys are built by hand (no GPU needed: the decoder validates all of it before opening anything).
Every seed is wire format 2: one codec key, ``tc.header``, whose JSON starts with the version and
the transport (``{"version":2,"transport":...,"leaves":...,<transport keys>,"tree":...}``).

Kinds covered: every wire dtype; contiguous, transposed, permuted, channels_last, strided-crop,
overlapping, broadcast (expand, including huge broadcast shapes over a few bytes), 0-d, empty and
zero-size tensors; requires_grad; every TVTensor class with its attributes; PackedSequences;
nested dict / list / tuple / namedtuple structures with every scalar kind, non-finite floats,
int dict keys and deep nesting; messages over 4 KiB (the decoder's zero-copy path) and under.
"""

from __future__ import annotations

import base64
import collections
import functools
import json
import math
import random
from dataclasses import dataclass

import torch

import tensor_codec as tc
from tensor_codec import testing

from .headers import ALIGNMENT, VERSION
from .values import uint8_recipe

__all__ = ["Seed", "build_seeds"]

IPC_ALIGNMENT = ALIGNMENT["cuda-ipc"]

Pair = collections.namedtuple("Pair", ["left", "right"])
Wide = collections.namedtuple("Wide", [f"f{i}" for i in range(40)])


@dataclass(frozen=True)
class Seed:
    name: str
    metadata: dict
    value: dict  # a value recipe (tools/fuzz/values.py)


def _objects() -> dict:
    g = torch.Generator().manual_seed(1234)
    objs: dict = {}
    objs.update({f"layout/{k}": v for k, v in testing.make_layout_cases(7).items()})
    objs.update({f"dtype/{k}": v for k, v in testing.make_dtype_cases(7).items()})
    # Every dtype again, transposed (dense, not row-major) and as a 0-d and an empty tensor.
    for name, t in testing.make_dtype_cases(8, shape=(4, 3)).items():
        objs[f"dtype_t/{name}"] = t.t()
    for name, t in testing.make_dtype_cases(9, shape=(1,)).items():
        objs[f"dtype_0d/{name}"] = t.reshape(())
        objs[f"dtype_empty/{name}"] = t[:0].reshape(0, 3, 0) if t.numel() else t
    objs.update({f"tv/{k}": v for k, v in testing.make_tvtensor_cases(7).items()})
    objs.update({f"packed/{k}": v for k, v in testing.make_packed_sequences(7).items()})
    objs["nested/detection"] = testing.make_detection_sample(7)
    objs["nested/many_small"] = testing.make_many_small(60, seed=7)
    objs["nested/empty_dict"] = {}
    objs["nested/empty_list"] = []
    objs["scalar/none"] = None
    objs["scalar/int"] = -(2**63)
    objs["scalar/str"] = "h\u00e9llo \U0001f600"
    objs["scalar/floats"] = {
        "nan": math.nan,
        "inf": math.inf,
        "-inf": -math.inf,
        "neg0": -0.0,
        "max": 1.7976931348623157e308,
        "tiny": 5e-324,
        "third": 1 / 3,
    }
    objs["nested/kinds"] = {
        "a": [torch.zeros(0, 3), (1.5, None, "s", True, False)],
        7: torch.ones(3, 3).expand(2, 3, 3),
        -1: Pair(torch.arange(4, dtype=torch.int16), {"": "", "k": [[], (), {}]}),
        "wide": Wide(*range(40)),
        "nonfinite": [math.nan, -math.inf, torch.tensor([math.nan, math.inf, -0.0])],
    }
    deep: object = torch.tensor([1, 2, 3], dtype=torch.uint8)
    for i in range(60):
        deep = [deep] if i % 3 == 0 else ((deep,) if i % 3 == 1 else {"d": deep})
    objs["nested/deep"] = deep
    objs["big/uint8"] = torch.randint(0, 256, (5000,), dtype=torch.uint8, generator=g)
    objs["big/float32_channels_last"] = torch.rand(2, 8, 16, 16, generator=g).to(memory_format=torch.channels_last)
    objs["big/bool"] = torch.randint(0, 2, (70, 70), generator=g).bool()
    objs["big/two_leaves"] = {
        "image": torch.randint(0, 256, (3, 40, 40), dtype=torch.uint8, generator=g),
        "mask": torch.ones(40, 40, dtype=torch.bool),
    }
    objs["broadcast/huge"] = torch.zeros(1, dtype=torch.float32).expand(8000, 8000)
    objs["broadcast/middle"] = torch.arange(6, dtype=torch.int32).reshape(2, 1, 3).expand(2, 1000, 3)
    objs["grad/float"] = torch.randn(3, 4, generator=g).requires_grad_()
    objs["grad/complex"] = torch.randn(2, 2, dtype=torch.complex64, generator=g).requires_grad_()
    objs["bool/0d"] = torch.tensor(True)
    objs["bool/empty"] = torch.zeros(0, dtype=torch.bool)
    return objs


def _value_bytes(value) -> bytes:
    if len(value) == 0:
        return b""
    return value.buffers()[1].to_pybytes()[value.offset : value.offset + len(value)]


def _ipc_seed(name: str, host_metadata: dict, rng: random.Random) -> Seed:
    """A CUDA IPC message of the same tensors, built by hand: 256-byte aligned canonical offsets, a
    `producer` for this machine (pid 1, a GPU no process here has) and ``tc.ipc.*`` keys. Its
    header's members in the writers' order: version, transport, leaves, producer, tree (the host
    header's own key, `gpu`, is not one of this transport's)."""
    from tensor_codec.cuda_ipc.identity import host_identity, pid_namespace

    host = json.loads(host_metadata["tc.header"])
    end = 0
    for i, leaf in enumerate(host["leaves"]):
        start = (end + IPC_ALIGNMENT - 1) // IPC_ALIGNMENT * IPC_ALIGNMENT if i else 0
        leaf["offset"] = start
        end = start + leaf["nbytes"]
    producer = {
        "host": host_identity(),
        "pidns": pid_namespace(),
        "pid": 1,
        "gpu": "GPU-" + "-".join(rng.randbytes(n).hex() for n in (4, 2, 2, 2, 6)),
        "ledger": "tc-1-" + rng.randbytes(6).hex(),
    }
    header = {
        "version": VERSION,
        "transport": "cuda-ipc",
        "leaves": host["leaves"],
        "producer": producer,
        "tree": host["tree"],
    }
    metadata = {
        "tc.header": json.dumps(header, separators=(",", ":"), ensure_ascii=False),
        "tc.ipc.handle": base64.b64encode(b"\x01c" + rng.randbytes(64)).decode("ascii"),
        "tc.ipc.offset": rng.choice([0, 512, 1 << 20]),
        "tc.ipc.size": end,
        "tc.ipc.event": base64.b64encode(rng.randbytes(64)).decode("ascii"),
        "tc.ipc.slot": rng.randrange(0, 65536),
        "tc.ipc.generation": rng.randrange(1, 1000),
    }
    return Seed(f"ipc/{name}", metadata, uint8_recipe(b""))


@functools.lru_cache(maxsize=1)
def build_seeds() -> tuple[Seed, ...]:
    """Every seed message, in a fixed order (case generation indexes into it)."""
    seeds = []
    for name, obj in _objects().items():
        try:
            value, metadata = tc.encode(obj, "host")
        except tc.EncodeError:  # outside this build's limits: not a seed
            continue
        seeds.append(Seed(name, dict(metadata), uint8_recipe(_value_bytes(value))))
    rng = random.Random("tc-fuzz-ipc-seeds")
    by_name = {s.name: s for s in seeds}
    for name in (
        "layout/transposed",
        "tv/boxes_xyxy",
        "nested/detection",
        "packed/packed_unsorted",
        "scalar/none",
        "dtype/bool",
    ):
        if name in by_name:
            seeds.append(_ipc_seed(name, by_name[name].metadata, rng))
    return tuple(seeds)
