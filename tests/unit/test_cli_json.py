"""The one writer of every verb's ``--json`` (fleet.cli.common.to_json): standard JSON, a NaN
or an infinity written as null at any depth, and never the ``NaN`` a strict parser refuses."""

from __future__ import annotations

import json
import math

import pytest

from fleet.cli.common import finite, to_json


def refuse(constant: str):
    raise ValueError(constant)


def test_nan_and_infinities_become_null_at_any_depth():
    data = {"a": math.nan, "b": [1.5, math.inf, {"c": -math.inf}], "d": (2, math.nan), "e": "nan"}
    got = json.loads(to_json(data), parse_constant=refuse)
    assert got == {"a": None, "b": [1.5, None, {"c": None}], "d": [2, None], "e": "nan"}


def test_finite_data_is_written_as_json_dumps_writes_it():
    data = {"x": [1, 2.5, "s", None, True], "y": {"z": 0.1}}
    assert to_json(data, indent=2) == json.dumps(data, indent=2)


def test_what_json_cannot_write_is_written_as_text():
    from pathlib import Path

    assert json.loads(to_json({"p": Path("/a/b")})) == {"p": "/a/b"}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_finite_replaces_each_non_finite_float(value):
    assert finite([value, 1.0]) == [None, 1.0]
