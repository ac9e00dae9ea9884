"""Guards against testing a stale copy. After a non-editable install (the README's test command) the tests import the
installed package; if its Python files differ from this checkout's, the run stops and says how to reinstall."""

import filecmp
import glob
import os

import pytest

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jax_cudnn_rnn")


def pytest_sessionstart(session):
    import jax_cudnn_rnn

    installed = os.path.dirname(os.path.abspath(jax_cudnn_rnn.__file__))
    if os.path.realpath(installed) == os.path.realpath(SOURCE):
        return
    stale = [os.path.basename(path) for path in sorted(glob.glob(os.path.join(SOURCE, "*.py")))
             if not filecmp.cmp(path, os.path.join(installed, os.path.basename(path)), shallow=False)
             if os.path.exists(os.path.join(installed, os.path.basename(path)))]
    missing = [os.path.basename(path) for path in glob.glob(os.path.join(SOURCE, "*.py"))
               if not os.path.exists(os.path.join(installed, os.path.basename(path)))]
    if stale or missing:
        pytest.exit(f"the jax_cudnn_rnn being tested ({installed}) is not this checkout's: {', '.join(stale + missing)} "
                    f"differ. Reinstall it (`.venv/bin/pip install \".[test]\"`), or develop with an editable install "
                    f"(README, Fresh machine)", returncode=4)
