"""Shared fixtures: the async tests run on asyncio (the SDK's servers do)."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
