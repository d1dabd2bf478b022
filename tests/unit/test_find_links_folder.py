"""Local find-links folders fall under the dossier-folder rule: the host's pip reads them for the wheelhouse."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.dossier.load import load_dossier
from orchestrator.errors import DossierError


def _with_find_links(example: Path, *links: str) -> Path:
    path = example / "dossier.yaml"
    data = yaml.safe_load(path.read_text())
    data["python"]["find_links"] = list(links)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("link", "said"),
    [
        ("/etc", "absolute"),
        ("../outside", ".."),
        ("file:///srv/wheels", "names a host folder by URL"),
        ("escape", "outside"),
    ],
)
def test_a_host_folder_outside_the_dossier_is_refused(tiny_example: Path, link: str, said: str) -> None:
    (tiny_example.parent / "outside").mkdir()
    (tiny_example / "escape").symlink_to(tiny_example.parent / "outside")
    with pytest.raises(DossierError) as caught:
        load_dossier(_with_find_links(tiny_example, "https://example.org/wheels/", link))
    assert caught.value.exit_code == 2
    message = str(caught.value)
    assert "[python.find_links[1]]" in message and said in message and "\n" not in message.strip()


def test_a_folder_inside_is_given_to_pip_by_its_real_path_and_urls_as_written(tiny_example: Path) -> None:
    (tiny_example / "wheels").mkdir()
    loaded = load_dossier(_with_find_links(tiny_example, "wheels", "https://example.org/wheels/"))
    assert loaded.find_links() == [str((tiny_example / "wheels").resolve()), "https://example.org/wheels/"]
