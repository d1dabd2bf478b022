"""Signed attestations: in-toto statements in DSSE envelopes, keys people already have, and trust files.

`keys` (signing keys by path or agent; the trust file), `ssh_agent` (signing through ssh-agent),
`envelope` (DSSE signing and checking, the SSH signature beside it), `statements` (the provenance and
verification statements, checked by the in-toto bindings). The hand-over folder and registry glue lives in
`orchestrator.stages.attestations`.
"""
