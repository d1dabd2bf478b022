"""Where the application's code comes from, and exactly which state of it goes into the image.

- A git URL: the tree of exactly `code.revision` (`context.export_git`), never a work tree.
- A local folder inside a git work tree with `code.revision`: the tree of that commit (`git archive`),
  whatever the work tree holds.
- A local folder inside a git work tree without a revision: the work tree, recording HEAD. Uncommitted
  changes are refused (`code.dirty: refuse`, the default) or recorded as a variant named after the hash
  of the diff (`code.dirty: record`).
- A plain folder: its files; the tree hash is part of the dossier's identity.

Whatever the source, the files reach the context by one rule (`orchestrator.dossier.paths`): regular
files and folders only, a symlink followed only when it stays inside (the dossier's folder for a local
folder, the exported tree for git) and then copied as content, never as a link; anything else is refused.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.dossier.load import LoadedDossier
from orchestrator.dossier.paths import Where, copy_tree, file_sha256, tree_sha256, walk_tree
from orchestrator.errors import BadInput, ToolMissing
from orchestrator.redact import redact
from orchestrator.untrusted import last_words

CodeKind = Literal["folder", "git-worktree", "git-revision", "git-url"]


@dataclass(frozen=True)
class CodeState:
    kind: CodeKind
    source: str  # redacted
    revision: str | None
    dirty: bool
    diff_sha256: str | None
    tree_sha256: str | None

    @property
    def variant(self) -> str | None:
        """A work tree with recorded changes is a variant of the reference, named by its diff."""
        return f"dirty-{self.diff_sha256[:12]}" if self.dirty and self.diff_sha256 else None


def git(*args: str, cwd: Path | None = None, check: bool = False) -> subprocess.CompletedProcess[bytes]:
    if shutil.which("git") is None:
        raise ToolMissing("git is not installed, and the dossier's code needs it", hint="apt-get install git")
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False, timeout=900)
    if check and result.returncode != 0:
        stderr = redact(result.stderr.decode(errors="replace").strip())
        raise BadInput(f"git {args[0]} failed in {cwd}: {last_words(stderr)}")
    return result


def _work_tree(folder: Path) -> Path | None:
    if shutil.which("git") is None:
        return None
    result = git("rev-parse", "--show-toplevel", cwd=folder)
    return Path(result.stdout.decode().strip()) if result.returncode == 0 else None


def _diff_sha256(folder: Path) -> str:
    """Hash of everything that differs from HEAD under `folder`: tracked changes and untracked files."""
    digest = hashlib.sha256(git("diff", "HEAD", "--binary", "--", ".", cwd=folder, check=True).stdout)
    untracked = git("ls-files", "--others", "--exclude-standard", "-z", "--", ".", cwd=folder, check=True)
    for name in sorted(filter(None, untracked.stdout.decode().split("\0"))):
        path = folder / name
        # A link is hashed as its target text, as git itself stores it: never followed out of the tree.
        content = os.readlink(path).encode() if path.is_symlink() else file_sha256(path).encode()
        digest.update(name.encode() + b"\0" + content)
    return digest.hexdigest()


def inspect_code(loaded: LoadedDossier) -> CodeState:
    code = loaded.model.code
    if code.is_git_url:
        return CodeState("git-url", redact(code.source), code.revision, False, None, None)
    folder = loaded.code_dir
    files = loaded.code_files()  # walked by the rule first: a link out of the folder stops here
    top = _work_tree(folder)
    if top is None:
        return CodeState("folder", code.source, None, False, None, tree_sha256(files))
    if code.revision is not None:
        if git("cat-file", "-e", f"{code.revision}^{{commit}}", cwd=folder).returncode != 0:
            raise BadInput(f"code.revision {code.revision} is not a commit of the repository at {top}")
        return CodeState("git-revision", code.source, code.revision, False, None, None)
    head = git("rev-parse", "HEAD", cwd=folder, check=True).stdout.decode().strip()
    status = git("status", "--porcelain", "--untracked-files=all", "--", ".", cwd=folder, check=True).stdout
    dirty = bool(status.strip())
    if dirty and code.dirty == "refuse":
        changed = status.decode().strip().splitlines()
        raise BadInput(
            f"the code folder {folder} has uncommitted changes ({len(changed)} paths, first: {changed[0].strip()})",
            hint="Commit them, pin code.revision, or set code.dirty: record to build them as a recorded variant.",
        )
    return CodeState(
        "git-worktree", code.source, head, dirty, _diff_sha256(folder) if dirty else None, tree_sha256(files)
    )


def export_git_revision(folder: Path, revision: str, dest: Path) -> None:
    """The files of `folder` as they are in commit `revision` (a subfolder of the repository is fine)."""
    prefix = git("rev-parse", "--show-prefix", cwd=folder, check=True).stdout.decode().strip()
    top = Path(git("rev-parse", "--show-toplevel", cwd=folder, check=True).stdout.decode().strip())
    # From the top level: run in a subfolder, git archive would also filter the tree by that subfolder.
    archive = git("archive", "--format=tar", f"{revision}:{prefix}" if prefix else revision, cwd=top, check=True)
    _extract(archive.stdout, dest, f"commit {revision} of {top}")


def export_git_url(url: str, revision: str, dest: Path, scratch: Path) -> None:
    """The tree of exactly `revision` fetched from `url` (shallow), extracted into `dest`."""
    scratch.mkdir(parents=True, exist_ok=True)
    for args in (("init", "--quiet"), ("fetch", "--quiet", "--depth", "1", url, revision)):
        result = git(*args, cwd=scratch)
        if result.returncode != 0:
            stderr = redact(result.stderr.decode(errors="replace").strip())
            raise BadInput(
                f"cannot fetch revision {revision} from {redact(url)}: "
                f"{stderr.splitlines()[-1] if stderr else 'git ' + args[0] + ' failed'}",
                hint="Check code.source and code.revision (a full commit id reachable from the URL).",
            )
    archive = git("archive", "--format=tar", "FETCH_HEAD", cwd=scratch, check=True)
    _extract(archive.stdout, dest, f"revision {revision} of {redact(url)}")


def _extract(archive: bytes, dest: Path, what: str) -> None:
    """Extract a git archive; the 'data' filter refuses links that leave `dest`, absolute or by '..'."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        try:
            tar.extractall(dest, filter="data")
        except tarfile.FilterError as exc:
            member = exc.tarinfo
            target = f" -> {member.linkname!r}" if member.issym() or member.islnk() else ""
            raise BadInput(
                f"the code at {what} holds {member.name!r}{target}, which leaves the code's tree: "
                "orch never follows a link out of it",
                hint="Replace the link by the file it points to, commit, and pin the new revision.",
            ) from None


def copy_code(loaded: LoadedDossier, state: CodeState, dest: Path, scratch: Path) -> None:
    """Put the code state `inspect_code` chose into `dest`."""
    code = loaded.model.code
    dest.mkdir(parents=True)
    if state.kind in ("git-url", "git-revision"):
        # Exported beside, then copied by the rule: links inside the tree become the files they name.
        export = scratch / "export"
        export.mkdir(parents=True)
        if state.kind == "git-url":
            assert code.revision is not None  # the schema requires it for git URLs
            export_git_url(code.source, code.revision, export, scratch / "fetch")
        else:
            assert state.revision is not None
            export_git_revision(loaded.code_dir, state.revision, export)
        where = Where(str(loaded.path), "code.source")
        copy_tree(list(walk_tree(export.resolve(), export.resolve(), where)), dest)
    else:
        copy_tree(loaded.code_files(), dest)
    if not (dest / code.entrypoint).is_file():
        raise BadInput(f"code.entrypoint {code.entrypoint!r} is not a file in the code source {code.source!r}")
