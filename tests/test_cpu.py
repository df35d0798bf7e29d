"""CPU runtime settings."""

import sys

import pytest

from syntaxnmt.cpu import keep_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_keep_freed_memory_takes_effect_and_is_idempotent():
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True
