"""Shared tools of the tests: a few real tools, and the runner processes of this process."""

from __future__ import annotations

import os
from typing import List

import pytest

import execbox


def add(input):
    """Adds a and b."""
    return {"sum": input["a"] + input["b"]}


@pytest.fixture
def calls() -> List[dict]:
    return []


@pytest.fixture
def tools(calls):
    def record(input):
        calls.append(input)
        return {"n": len(calls)}

    return {"math": {"add": add}, "log": {"record": record}}


def child_pids() -> List[int]:
    """The processes this process started and that still run."""
    pids: List[int] = []
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            pass
    return pids


__all__ = ["add", "child_pids", "execbox"]
