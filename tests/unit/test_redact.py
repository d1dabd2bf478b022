from __future__ import annotations

import pytest

from orchestrator.redact import redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://user:s3cret@pypi.example.org/simple", "https://****@pypi.example.org/simple"),
        ("pip --index-url https://tok@host/simple x", "pip --index-url https://****@host/simple x"),
        ("https://host/simple?token=abc123&x=1", "https://host/simple?token=****&x=1"),
        ("https://b.s3.amazonaws.com/f?X-Amz-Signature=deadbeef", "https://b.s3.amazonaws.com/f?X-Amz-Signature=****"),
        ("https://host/simple?api_key=k", "https://host/simple?api_key=****"),
        ("plain text with user@example.org", "plain text with user@example.org"),
        ("https://host/simple/", "https://host/simple/"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
