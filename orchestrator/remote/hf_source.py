"""`hf://owner/repo@<commit>/<path>` items, with huggingface_hub (the hub's own client): a file
(`hf_hub_download`) or a folder (`…/<folder>/`: `snapshot_download` of the files under it), at the pinned
commit, into the item's partial folder (the client resumes an interrupted file there itself).

The token is the item's variable or none: `token=False` keeps the client from reading a token stored by
`huggingface-cli login` or HF_TOKEN, so the dossier's `access` is the only credential. HF_ENDPOINT (the
client's own setting) points it at a mirror. Not exercised against a server here: the hub cannot be reached
from the test machines and huggingface_hub offers no local server; the uri parsing and pinning are unit-tested.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from orchestrator.redact import redact
from orchestrator.remote.transfer import FetchRequest, fetch_failed


def fetch_hf(request: FetchRequest) -> Path:
    # Imported here: the client is large and only hf:// items need it.
    import huggingface_hub
    import huggingface_hub.errors as hf_errors

    source = request.source
    local = request.staging / "hf"
    token: str | bool = request.credential or False
    endpoint = os.environ.get("HF_ENDPOINT") or None
    try:
        if source.folder:
            huggingface_hub.snapshot_download(
                source.location,
                repo_type=source.repo_type,
                revision=source.pin,
                allow_patterns=[f"{source.path}/**"],
                local_dir=local,
                token=token,
                endpoint=endpoint,
            )
            shutil.rmtree(local / ".cache", ignore_errors=True)  # the client's bookkeeping, not the item's
            tree = local / source.path
            if not tree.is_dir():
                raise fetch_failed(request, f"no file under {source.path}/ at commit {source.pin}")
            return tree
        path = huggingface_hub.hf_hub_download(
            source.location,
            source.path,
            repo_type=source.repo_type,
            revision=source.pin,
            local_dir=local,
            token=token,
            endpoint=endpoint,
        )
        return Path(path)
    except (hf_errors.RepositoryNotFoundError, hf_errors.RevisionNotFoundError) as exc:
        raise fetch_failed(request, f"not found or not allowed ({type(exc).__name__})") from None
    except hf_errors.EntryNotFoundError:
        raise fetch_failed(request, f"{source.path} is not in the repository at {source.pin}") from None
    except hf_errors.HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise fetch_failed(request, f"the hub refused the credential (HTTP {status})") from None
        raise fetch_failed(request, redact(str(exc).splitlines()[0][:300])) from None
    except OSError as exc:  # offline, DNS, connection refused, timeouts: the client raises OSError kinds
        raise fetch_failed(request, redact(str(exc).splitlines()[0][:300] or type(exc).__name__)) from None
