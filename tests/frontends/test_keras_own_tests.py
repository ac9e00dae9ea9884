"""Keras's own tests for LSTM, GRU and SimpleRNN (keras/src/layers/rnn/lstm_test.py, keras/src/layers/rnn/gru_test.py
and keras/src/layers/rnn/simple_rnn_test.py, shipped in the Keras wheel) pass with jax_cudnn_rnn.keras's classes in
their place: one child pytest (KERAS_BACKEND=jax) on the installed Keras's files, with
tests/frontends/keras_substitution.py substituting the classes (its EXPECTED_FAILURES: the cases that need what the core
does not run yet, strict xfails). Every case must pass, be one of those, or be one of Keras's own skips for another
backend (``KERAS_SKIPS``): nothing else is skipped. About a minute."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skips import REQUIRE_PEERS, skip_or_fail
from support import import_or_skip

os.environ["KERAS_BACKEND"] = "jax"  # Keras reads it once, at its first import
keras = import_or_skip("keras")

import jax_cudnn_rnn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ("lstm_test.py", "gru_test.py", "simple_rnn_test.py")
# Keras's own skipif markers: these cases test another backend's code, and cannot apply on JAX.
KERAS_SKIPS = {
    "GRUTest::test_stateful_with_symbolic_batch_size": "TensorFlow backend",
    "GRUTest::test_torch_cudnn_dispatch_fires": "torch-backend cuDNN dispatch",
}


def test_keras_own_rnn_tests_pass_with_our_layers(tmp_path):
    sys.path.insert(0, HERE)
    try:
        from keras_substitution import EXPECTED_FAILURES
    finally:
        sys.path.remove(HERE)
    folder = os.path.join(os.path.dirname(keras.__file__), "src", "layers", "rnn")
    missing = [name for name in FILES if not os.path.exists(os.path.join(folder, name))]
    if missing:
        skip_or_fail(f"this Keras ({keras.__version__}) ships no {', '.join(missing)} in {folder}", REQUIRE_PEERS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    outcomes = tmp_path / "outcomes.json"
    # The child imports the jax_cudnn_rnn this run imports (PYTHONSAFEPATH: not whatever its cwd holds) and the plugin.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(jax_cudnn_rnn.__file__)))
    paths = [package_root, HERE, os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "PYTHONSAFEPATH": "1",
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "JAX_CUDNN_RNN_KERAS_OUTCOMES": str(outcomes),
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "keras_substitution", "-p", "no:cacheprovider"]
    command += ["-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path)]
    result = subprocess.run(
        [*command, *(os.path.join(folder, name) for name in FILES)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp_path,
    )
    tail = result.stdout[-6000:] + result.stderr[-3000:]
    assert outcomes.exists(), tail
    cases = json.loads(outcomes.read_text())
    assert {name.split("::")[0] for name in cases} == {"LSTMTest", "GRUTest", "SimpleRNNTest"}, cases
    wrong = {}
    for name, got in cases.items():
        if name in EXPECTED_FAILURES:
            expected = "xfailed"
        elif name in KERAS_SKIPS and KERAS_SKIPS[name] in got["reason"]:
            expected = "skipped"
        else:
            expected = "passed"
        if got["outcome"] != expected:
            wrong[name] = f"{got['outcome']} (expected {expected}) {got['reason']}"
    assert not wrong, f"{wrong}\n{tail}"
    assert result.returncode == 0, tail
    assert set(EXPECTED_FAILURES) <= set(cases), "an expected failure names a case Keras no longer has"
