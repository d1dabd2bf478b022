"""Redaction of credentials in text: URLs' `user:token@` and token-like query parameters.

Applied to every log line, record and label orch writes, as a second line of defence: the dossier
already refuses credentials in URLs, but pip, git and docker can echo URLs built from the environment.
"""

from __future__ import annotations

import re

REDACTED = "****"

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/\s@]+)@")
_QUERY_TOKEN = re.compile(
    r"(?P<key>[?&](?:[A-Za-z0-9_.-]*(?:token|key|secret|password|passwd|auth|signature|sig|credential)"
    r"[A-Za-z0-9_.-]*)=)(?P<value>[^&\s#]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    return _QUERY_TOKEN.sub(lambda m: f"{m.group('key')}{REDACTED}", text)
