"""What `orch record` leaves out (issue 25, point 9): numerics variables that may hold a secret, and the
symbolic links of a code folder, each named in the record's notes."""

from __future__ import annotations

from pathlib import Path

from orchestrator.record.observe import WITHHELD, numerics_environment, withheld_numerics
from orchestrator.record.run import _copy_tree, links_note

ENVIRON = {
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:128",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "OMP_NUM_THREADS": "4",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "TORCH_HOME": "/opt/torch-cache",
    "PYTORCH_HUB_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUvWx",  # the name says so
    "TORCH_SECRET_SAUCE": "1",  # the name says so, whatever the value
    "MKL_LICENSE": "AKIAABCDEFGHIJKLMNOP",  # an AWS access key id as a value
    "TORCH_EXTRA": "ghp_0123456789abcdefghijABCDEFGHIJ",  # a GitHub token as a value
    "HIP_BLOB": "dGhpcyBpcyBhIHNlY3JldCB0b2tlbiAxMjM0NTY3ODkw",  # a long run of letters and digits
    "AWS_SECRET_ACCESS_KEY": "not in the numerics table at all",
}


def test_numerics_keep_settings_and_never_a_credential() -> None:
    kept = numerics_environment(ENVIRON)
    assert kept["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True,max_split_size_mb:128"
    assert kept["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and kept["OMP_NUM_THREADS"] == "4"
    assert kept["CUDA_VISIBLE_DEVICES"] == "0,1" and kept["TORCH_HOME"] == "/opt/torch-cache"
    assert "PYTORCH_HUB_TOKEN" not in kept and "TORCH_SECRET_SAUCE" not in kept
    assert kept["MKL_LICENSE"] == kept["TORCH_EXTRA"] == kept["HIP_BLOB"] == WITHHELD
    assert "AWS_SECRET_ACCESS_KEY" not in kept
    text = repr(kept)
    for secret in ("hf_AbCd", "AKIAABCD", "ghp_0123", "dGhpcyBp"):
        assert secret not in text


def test_the_withheld_are_named_without_their_values() -> None:
    assert withheld_numerics(ENVIRON) == [
        "HIP_BLOB",
        "MKL_LICENSE",
        "PYTORCH_HUB_TOKEN",
        "TORCH_EXTRA",
        "TORCH_SECRET_SAUCE",
    ]


def test_links_in_the_code_folder_are_not_copied_and_are_named(tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "main.py").write_text("print(1)\n")
    (code / "pkg" / "real.py").write_text("x = 1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host file\n")
    (code / "config.yaml").symlink_to(outside / "secret.txt")
    (code / "data").symlink_to(outside)
    dest = tmp_path / "app"
    links = _copy_tree(code, dest, set())
    assert links == ["config.yaml", "data"]
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == ["main.py", "pkg/real.py"]
    note = links_note("app", links)
    assert note is not None and note.startswith("app/config.yaml, app/data: symbolic link(s) in the code folder")
    assert str(outside) not in note
    assert links_note("app", []) is None
