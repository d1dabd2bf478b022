from __future__ import annotations

import pytest

from orchestrator.dossier.lock import parse_lock
from orchestrator.errors import LockError

HASH_A = "a" * 64
HASH_B = "b" * 64


def test_pins_hashes_markers_and_continuations() -> None:
    lock = parse_lock(
        f"""# comment
torch==2.13.0+cpu \\
    --hash=sha256:{HASH_A} \\
    --hash=sha256:{HASH_B}
Typing_Extensions==4.16.0 --hash=sha256:{HASH_A}  # trailing comment
colorama==0.4.6 ; sys_platform == "win32"
"""
    )
    torch = lock.get("torch")
    assert torch is not None
    assert str(torch.version) == "2.13.0+cpu"
    assert torch.hashes == (HASH_A, HASH_B)
    assert torch.line == 2
    typing_ext = lock.get("typing-extensions")
    assert typing_ext is not None and typing_ext.name == "typing-extensions" and typing_ext.line == 5
    colorama = lock.get("colorama")
    assert colorama is not None and colorama.marker == 'sys_platform == "win32"'
    assert not lock.fully_hashed


def test_extras_are_kept_in_the_requirement_text() -> None:
    lock = parse_lock("uvicorn[standard]==0.30.0\n")
    assert lock.requirements[0].text == "uvicorn[standard]==0.30.0"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("torch>=2.0\n", 1, "not pinned"),
        ("numpy==1.*\n", 1, "not pinned"),
        ("numpy==1.0,<2\n", 1, "not pinned"),
        ("\n--index-url https://example.org/simple\nnumpy==1.0\n", 2, "not allowed in the lock"),
        ("-e ./local\n", 1, "not allowed in the lock"),
        ("numpy==1.0 --hash=md5:abc\n", 1, "bad hash option"),
        ("numpy==1.0\nNumPy==1.1\n", 2, "pinned twice"),
        ("pkg @ https://example.org/pkg.whl\n", 1, "direct URLs"),
        ("not a requirement!\n", 1, "not a requirement"),
        ("# only comments\n", 1, "pins no package"),
    ],
)
def test_bad_locks_name_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(LockError) as caught:
        parse_lock(text)
    assert caught.value.line == line
    assert message in str(caught.value)
