"""Credentials read from the environment variable a dossier, plan or option names: the one way orch reads a secret.

A utility at the bottom of the house (it imports only the error root). The name of the variable travels in
plans, dossiers and hand-overs; its value is read here, at the moment it is used, and never written, logged
or recorded. A variable that is named but not set (or empty) is bad input naming the variable, never a value.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.errors import BadInput


def credential(variable: str, environ: Mapping[str, str], *, needed_by: str, form: str) -> str:
    """The value of `variable` in `environ`; BadInput naming it (and `needed_by`) when it is not set or empty.

    `form` says what the value looks like in the hint (`'user:token'`), never what it is."""
    value = environ.get(variable)
    if not value:
        raise BadInput(
            f"{needed_by} needs the credential in ${variable}, which is not set",
            hint=f"export {variable}={form} in the environment that runs orch; orch reads it by name and never "
            "writes or records its value.",
        )
    return value


def user_and_token(value: str) -> tuple[str, str]:
    """A `user:token` credential split at its first colon (a token may hold colons); no colon: a user, no token."""
    user, _, token = value.partition(":")
    return user, token
