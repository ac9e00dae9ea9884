"""One version number: pyproject.toml's, ``jax_cudnn_rnn.__version__``, the CHANGELOG's newest section and the
deprecation warnings agree (issue 49: the package said 0.1.0 while its CHANGELOG and warnings spoke of 0.2.0)."""

import pathlib
import re
import tomllib

from packaging.version import Version

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import _deprecated

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_pyproject_and_the_package_say_the_same_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == jcr.__version__


def test_the_changelogs_newest_section_is_this_version():
    newest = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE).group(1)
    assert Version(newest) == Version(Version(jcr.__version__).base_version)


def test_deprecations_date_from_a_release_up_to_this_one_and_end_after_it():
    here = Version(Version(jcr.__version__).base_version)
    assert Version(_deprecated.DEPRECATED_SINCE) <= here < Version(_deprecated.REMOVED_IN)
