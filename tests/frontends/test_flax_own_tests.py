"""Flax's own tests of ``nn.RNN``, ``nn.Bidirectional`` and ``nnx.RNN`` (``tests/linen/linen_recurrent_test.py`` and
``tests/nnx/nn/recurrent_test.py``, which Flax ships in its source distribution, not its wheel) pass with
jax_cudnn_rnn's modules in place of ``nn.RNN`` and ``nnx.RNN``: the files of the installed Flax's version, downloaded
with pip (``pip download --no-deps --no-binary :all: flax==<version>``; ``JAX_CUDNN_RNN_FLAX_SDIST`` may name such an
archive instead), run in one child pytest with tests/frontends/flax_substitution.py substituting the layer. Nothing of
Flax's tests is copied here. Every case of the layers' classes must pass, be one of the plugin's ``REFUSED`` (a cell
without a fused kernel, which our module refuses) or ``EXPECTED_FAILURES`` (documented semantic differences); the
cells' own cases are not run. About half a minute."""

import json
import os
import subprocess
import sys
import tarfile

from skips import REQUIRE_PEERS, skip_or_fail
from support import import_or_skip

flax = import_or_skip("flax")

import jax_cudnn_rnn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ("tests/linen/linen_recurrent_test.py", "tests/nnx/nn/recurrent_test.py")
AT_LEAST = 21  # of the layers' cases that are not refused cells (the issue's target)


def _sdist(folder: str) -> str:
    """The path of the installed Flax's source distribution: ``JAX_CUDNN_RNN_FLAX_SDIST``, or downloaded by pip into
    ``folder``."""
    given = os.environ.get("JAX_CUDNN_RNN_FLAX_SDIST")
    if given:
        return given
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation"]
    command += ["-d", folder, f"flax=={flax.__version__}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    found = [name for name in os.listdir(folder) if name.startswith("flax-") and name.endswith(".tar.gz")]
    if result.returncode != 0 or not found:
        skip_or_fail(
            f"pip could not download Flax {flax.__version__}'s source distribution: {result.stderr[-800:]}",
            REQUIRE_PEERS,
        )
    return os.path.join(folder, found[0])


def _extract(archive: str, folder: str) -> list[str]:
    """Flax's two test files from ``archive``, written under ``folder``."""
    paths = []
    with tarfile.open(archive) as tar:
        members = {member.name.split("/", 1)[-1]: member for member in tar.getmembers()}
        for name in FILES:
            if name not in members:
                skip_or_fail(f"Flax {flax.__version__}'s source distribution has no {name}", REQUIRE_PEERS)
            target = os.path.join(folder, os.path.basename(name))
            with tar.extractfile(members[name]) as source, open(target, "wb") as out:
                out.write(source.read())
            paths.append(target)
    return paths


def test_flax_own_recurrent_tests_pass_with_our_modules(tmp_path):
    sys.path.insert(0, HERE)
    try:
        from flax_substitution import EXPECTED_FAILURES, LAYER_CLASSES, REFUSED
    finally:
        sys.path.remove(HERE)
    download = tmp_path / "download"
    download.mkdir()
    tests = tmp_path / "flax_tests"
    tests.mkdir()
    paths = _extract(_sdist(str(download)), str(tests))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    outcomes = tmp_path / "outcomes.json"
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(jax_cudnn_rnn.__file__)))
    path = [package_root, HERE, os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        "PYTHONSAFEPATH": "1",
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "JAX_CUDNN_RNN_FLAX_OUTCOMES": str(outcomes),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "flax_substitution", "-p", "no:cacheprovider"]
    command += ["-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-p", "no:xdist"]
    result = subprocess.run([*command, *paths], capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    tail = result.stdout[-6000:] + result.stderr[-3000:]
    assert outcomes.exists(), tail
    cases = json.loads(outcomes.read_text())
    assert {name.split("::")[0] for name in cases} == set(LAYER_CLASSES), cases
    wrong = {}
    for name, got in cases.items():
        expected = "xfailed" if name in EXPECTED_FAILURES or name in REFUSED else "passed"
        if got["outcome"] != expected:
            wrong[name] = f"{got['outcome']} (expected {expected}) {got['reason']}"
    assert not wrong, f"{wrong}\n{tail}"
    assert result.returncode == 0, tail
    assert set(EXPECTED_FAILURES) | set(REFUSED) <= set(cases), "an exception names a case Flax no longer has"
    layer_cases = [name for name in cases if name not in REFUSED]
    passed = [name for name in layer_cases if cases[name]["outcome"] == "passed"]
    assert len(passed) >= AT_LEAST, (len(passed), len(layer_cases))
