"""`s3://` items, with boto3 (AWS's own SDK; any S3-compatible store through the item's `endpoint`).

The credential is the item's variable, `KEY_ID:SECRET` or `KEY_ID:SECRET:SESSION_TOKEN`, handed to the
client directly: boto3's own chain (~/.aws, instance metadata, AWS_* variables) is never consulted, so what
the dossier says is what is used, on every machine. No `access`: unsigned requests (a public bucket).

A file resumes with a ranged GetObject guarded by IfMatch on the ETag seen first (a changed object answers
412 and is fetched whole). A folder (`s3://bucket/prefix/`) is every object under the prefix, each fetched
the same way into the folder; the folder's tree hash is the fingerprint.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
from botocore import UNSIGNED

from orchestrator.redact import redact
from orchestrator.remote.transfer import CHUNK, FetchRequest, Resumable, fetch_failed

#: Error codes of a refused credential (AWS and the S3-compatible stores that copy its words).
_AUTH_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken", "403"}


def _client(request: FetchRequest) -> Any:
    config = botocore.config.Config(
        signature_version=UNSIGNED if not request.credential else None,
        connect_timeout=request.timeout_s,
        read_timeout=request.timeout_s,
        retries={"max_attempts": 3, "mode": "standard"},
        s3={"addressing_style": "path"} if request.endpoint else None,
        # The dossier's endpoint or AWS: never one from AWS_ENDPOINT_URL* or ~/.aws/config.
        ignore_configured_endpoint_urls=True,
    )
    # us-east-1 works for every bucket: boto3 follows S3's redirect to the bucket's own region.
    options: dict[str, Any] = {"config": config, "region_name": "us-east-1"}
    if request.credential:
        key_id, _, rest = request.credential.partition(":")
        secret, _, token = rest.partition(":")
        if not key_id or not secret:
            raise fetch_failed(request, f"${request.access} must hold KEY_ID:SECRET (or KEY_ID:SECRET:SESSION_TOKEN)")
        options.update(aws_access_key_id=key_id, aws_secret_access_key=secret, aws_session_token=token or None)
    if request.endpoint:
        options["endpoint_url"] = request.endpoint
    if request.ca_bundle:
        options["verify"] = request.ca_bundle
    # The keys are given to the client, so boto3's credential chain (~/.aws, AWS_* variables) is not consulted.
    return boto3.session.Session().client("s3", **options)


def fetch_s3(request: FetchRequest) -> Path:
    client = _client(request)
    bucket, key = request.source.location, request.source.path
    try:
        if not request.source.folder:
            return _object(client, request, bucket, key, Resumable(request.staging))
        tree = request.staging / "tree"
        paginator = client.get_paginator("list_objects_v2")
        keys = [
            item["Key"] for page in paginator.paginate(Bucket=bucket, Prefix=key) for item in page.get("Contents", [])
        ]
        if not keys:
            raise fetch_failed(request, f"no object under the prefix {key!r}")
        for index, object_key in enumerate(sorted(keys)):
            relative = PurePosixPath(object_key[len(key) :])
            if not relative.parts or ".." in relative.parts or relative.is_absolute():
                continue  # the prefix's own "folder" marker, or a key no folder can hold
            done = Resumable(request.staging / "parts" / str(index))
            data = _object(client, request, bucket, object_key, done)
            target = tree.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            data.replace(target)
        return tree
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        if code in _AUTH_CODES:
            raise fetch_failed(request, f"the store refused the credential ({code})") from None
        if code in ("NoSuchKey", "NoSuchBucket", "404"):
            raise fetch_failed(request, f"not found ({code})") from None
        raise fetch_failed(request, redact(f"{code}: {error.get('Message', '')}")) from None
    except botocore.exceptions.BotoCoreError as exc:
        raise fetch_failed(request, redact(str(exc).splitlines()[0][:300])) from None


def _object(client: Any, request: FetchRequest, bucket: str, key: str, part: Resumable) -> Path:
    offset, validator = part.offset, part.validator
    arguments: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if offset and validator:
        arguments.update(Range=f"bytes={offset}-", IfMatch=validator)
    try:
        answer = client.get_object(**arguments)
    except botocore.exceptions.ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if offset and code in ("PreconditionFailed", "412", "InvalidRange", "416"):
            part.restart(None)  # the object changed (or shrank) since the partial: fetch it whole
            return _object(client, request, bucket, key, part)
        raise
    body = answer["Body"]
    try:
        length = int(answer.get("ContentLength") or 0)
        if "ContentRange" not in answer or not offset:
            part.restart(answer.get("ETag"))
            total = length
        else:
            total = offset + length
        part.append(body.iter_chunks(CHUNK), total, request.on_bytes)
    finally:
        body.close()
    if part.offset != total:
        raise fetch_failed(
            request, f"the connection ended after {part.offset} of {total} bytes (fetch again to resume)"
        )
    return part.data
