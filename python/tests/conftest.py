"""pytest fixtures shared by the cephalo Python suite's modules."""

import pytest

import cephalo
from support import DEFAULT


@pytest.fixture(scope="module")
def default_plan():
    return cephalo.plan(DEFAULT, strategy="even", compute_model="roofline")
