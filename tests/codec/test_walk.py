"""One walker (tensor_codec/walk.py), one rule: every walk over a sender's structure (encode, map,
iteration, the nodes' digest, the tests' comparison) accepts and refuses the same objects, with
the same message naming the same path, and stops at the same depth."""

from __future__ import annotations

import collections
from collections import OrderedDict

import pytest
import torch

import tensor_codec as tc
from tensor_codec import testing, tree
from tensor_codec.digest import content_digest
from tensor_codec.wire.structure import MAX_DEPTH

P = collections.namedtuple("P", "x y")


def _walks():
    return {
        "encode": tc.encode,
        "flatten": tree.flatten,
        "map_tensors": lambda obj: tc.map_tensors(lambda plain, original: plain, obj),
        "iter_leaves": lambda obj: list(tree.iter_leaves(obj)),
        "content_digest": content_digest,
        "assert_identical": lambda obj: testing.assert_identical(obj, obj, strides="ignore"),
    }


def _nest(levels: int):
    obj: list = []
    for _ in range(levels):
        obj = [obj]
    return obj


class Sub(torch.Tensor):
    pass


REFUSED = [
    ({"boxes": [1, 2, {3}]}, "unsupported type at `$.boxes[2]`"),
    ({"a": OrderedDict(x=1)}, "unsupported type at `$.a`"),  # a dict subclass is not a dict
    ([torch.zeros(1).as_subclass(Sub)], "unsupported type at `$[0]`: expected"),
    ({"a": (1, {1.5: 2})}, "unsupported dict key at `$.a[1]`"),
    ({"a": {1 << 63: 0}}, "dict key out of range at `$.a`"),
    ({"a": P(1, 1 << 64)}, "integer out of range at `$.a.y`"),
    (_nest(MAX_DEPTH + 1), "structure too deep at `$" + "[0]" * (MAX_DEPTH + 1) + "`"),
]


@pytest.mark.parametrize("name", list(_walks()))
@pytest.mark.parametrize("obj,message", REFUSED, ids=[m.split(" at")[0] for _, m in REFUSED])
def test_every_walk_refuses_the_same_objects_naming_the_same_path(name, obj, message):
    with pytest.raises(tc.EncodeError) as info:
        _walks()[name](obj)
    assert message in str(info.value)


@pytest.mark.parametrize("name", list(_walks()))
def test_every_walk_takes_the_deepest_structure_encode_takes(name):
    _walks()[name](_nest(MAX_DEPTH))


def test_self_referencing_structure_stops_every_walk():
    loop: list = []
    loop.append(loop)
    for _name, run in _walks().items():
        with pytest.raises(tc.EncodeError, match="too deep"):
            run(loop)


def test_the_walks_agree_on_order_and_paths():
    suite = testing.make_suite()
    tree_json, leaves = tree.flatten(suite)
    paths = [path for _, path in leaves]
    assert tree.leaf_paths(tree_json) == paths
    tensors = [(path, x) for path, x in tree.iter_leaves(suite) if isinstance(x, torch.Tensor)]
    assert [path for path, _ in tensors] == paths
    seen = []
    tc.map_tensors(lambda plain, original: seen.append(original) or plain, suite)
    assert seen == [x for _, x in tensors]


def test_the_content_digest_is_unchanged_by_the_walker():
    """Values computed by the digest's own walker before it used walk.fold: senders and receivers
    of different checkouts still agree."""
    obj = {
        "a": [1, 2.5, float("nan"), None, True, "hi"],
        3: (torch.arange(6, dtype=torch.int16).reshape(2, 3).t(), P(-0.0, torch.ones(2, requires_grad=True))),
    }
    assert content_digest(obj) == "crc32:be208021"
    assert content_digest(testing.make_detection_sample()) == "crc32:c67580e8"


def test_assert_identical_names_the_path_of_the_first_difference():
    expected = {"meta": {"boxes": [1, 2, P(3, 4.0)]}}
    with pytest.raises(AssertionError, match=r"^\$\.meta\.boxes\[2\]\.y: expected 4\.0, got 5\.0"):
        testing.assert_identical({"meta": {"boxes": [1, 2, P(3, 5.0)]}}, expected)
    with pytest.raises(AssertionError, match=r"^\$\.meta\.boxes: expected length 3, got 2"):
        testing.assert_identical({"meta": {"boxes": [1, 2]}}, expected)
    with pytest.raises(AssertionError, match=r"^\$\.meta: expected type dict, got list"):
        testing.assert_identical({"meta": []}, expected)
