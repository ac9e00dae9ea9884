"""Issue 37: a native extension whose XLA FFI handlers the running jax would refuse is never registered.

XLA refuses a handler whose FFI API version is newer than its own when it initializes its backend, and that backend
then fails for every computation, ours or not. The loader compares each module's recorded FFI API version with the
running jaxlib's before registering (jax_cudnn_rnn/backends/native_extension.py): these tests check the comparison, the
refusal's message, that nothing is registered, and what ``rnn()`` does then (the default falls back to the xla
implementation, an explicit ``implementation="onednn"`` names the versions). tests/packaging/test_wheel.py installs an
isolated build next to the declared floor jax and one between the floor and this one, in fresh processes.
"""

import contextlib
import importlib
import importlib.metadata
import os
import re
import sys
import tomllib
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import native_extension
from jax_cudnn_rnn.backends.cudnn import extension as cudnn_extension
from jax_cudnn_rnn.backends.onednn import extension as onednn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from skips import REQUIRE_EXTENSION, REQUIRE_ONEDNN, skip_or_fail  # noqa: E402


def _build_floor() -> str:
    """The jaxlib whose FFI headers an isolated build compiles against (pyproject.toml's build requirements)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        requires = tomllib.load(f)["build-system"]["requires"]
    return next(re.match(r"jaxlib==([\w.]+)", r).group(1) for r in requires if r.startswith("jaxlib=="))


def test_the_build_pins_the_declared_floor_jaxlib():
    """The headers' jaxlib is the oldest jax the package declares, so that handlers built by an isolated build load
    on every declared jax (XLA accepts a handler at most as new as itself)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    assert f"jax>={_build_floor()}" in dependencies


def test_the_table_agrees_with_the_running_jaxlib_headers():
    """The running jaxlib's headers are read first; the table must say the same for a release it lists."""
    running = importlib.metadata.version("jaxlib")
    version = native_extension.running_xla_ffi_api_version()
    assert version is not None and version[0] == 0 and version[1] >= 1
    if running in native_extension.XLA_FFI_API_OF_JAXLIB:
        assert native_extension.XLA_FFI_API_OF_JAXLIB[running] == version
    assert native_extension.XLA_FFI_API_OF_JAXLIB[_build_floor()] == (0, 1)
    # The table only ever goes up with the release.
    ordered = sorted(native_extension.XLA_FFI_API_OF_JAXLIB, key=native_extension._release)
    assert [native_extension.XLA_FFI_API_OF_JAXLIB[r] for r in ordered] == sorted(
        native_extension.XLA_FFI_API_OF_JAXLIB.values()
    )


def test_without_headers_the_table_answers(monkeypatch):
    """A jaxlib whose wheel ships no headers: the newest listed release at or before it decides."""
    monkeypatch.setattr(native_extension.importlib.util, "find_spec", lambda name: None)
    for running, want in (
        ("0.9.0", (0, 2)),
        ("0.9.2", (0, 2)),
        ("0.11.1.dev20260101", (0, 4)),
        ("0.13.0", (0, 5)),
        ("0.6.0", None),
    ):
        monkeypatch.setattr(native_extension, "_jaxlib_version", lambda running=running: running)
        assert native_extension.running_xla_ffi_api_version() == want, running


class _Module:
    __file__ = "/site-packages/jax_cudnn_rnn/_onednn_rnn.so"

    def __init__(self, built, jaxlib="0.10.2"):
        self.XLA_FFI_API_BUILD_VERSION, self.JAXLIB_BUILD_VERSION = built, jaxlib


def test_a_module_that_records_no_version_is_refused():
    """A module built before modules recorded their FFI API version (a stale build): nothing says it is safe."""
    module = _Module(None)
    del module.XLA_FFI_API_BUILD_VERSION
    reason = native_extension.ffi_api_refusal("oneDNN extension", "cpu", module)
    assert "does not record the XLA FFI API version" in reason and "_onednn_rnn.so" in reason
    assert "isolated build" in reason


@pytest.mark.parametrize(
    "built, running, refused",
    [
        ((0, 1), (0, 1), False),
        ((0, 1), (0, 5), False),
        ((0, 3), (0, 3), False),
        ((0, 3), (0, 2), True),
        ((0, 2), (0, 1), True),
        ((1, 0), (0, 5), True),
        ((0, 1), (1, 0), True),
    ],
)
def test_refused_exactly_when_xla_would_refuse(monkeypatch, built, running, refused):
    monkeypatch.setattr(native_extension, "running_xla_ffi_api_version", lambda: running)
    reason = native_extension.ffi_api_refusal("oneDNN extension", "cpu", _Module(built))
    assert (reason is not None) == refused, reason


def test_the_refusal_names_both_versions_and_the_fix(monkeypatch):
    monkeypatch.setattr(native_extension, "running_xla_ffi_api_version", lambda: (0, 2))
    monkeypatch.setattr(native_extension, "_jaxlib_version", lambda: "0.9.0")
    reason = native_extension.ffi_api_refusal("oneDNN extension", "cpu", _Module((0, 3)))
    assert "oneDNN extension was compiled against the XLA FFI headers of jaxlib 0.10.2 (XLA FFI API 0.3)" in reason
    assert "running jaxlib 0.9.0 (XLA FFI API 0.2)" in reason
    assert "none were registered" in reason and "on cpu" in reason
    assert "isolated build" in reason and "jax and jaxlib >= 0.10.0" in reason


@pytest.fixture
def refused_onednn(monkeypatch):
    """The oneDNN extension reloaded as if the running jaxlib were older than its build: (the warnings its load gave,
    the FFI targets it tried to register). Reloaded as it was after the test."""
    if not onednn.extension_loaded():
        skip_or_fail(f"the oneDNN extension is not loaded: {onednn.extension_error()}", REQUIRE_ONEDNN)
    built = tuple(onednn.module().XLA_FFI_API_BUILD_VERSION)
    registered = []
    with monkeypatch.context() as patch:
        patch.setattr(
            native_extension,
            "running_xla_ffi_api_version",
            lambda: (built[0], built[1] - 1) if built[1] else (built[0] - 1, 99),
        )
        patch.setattr(jax.ffi, "register_ffi_target", lambda *args, **kwargs: registered.append(args[0]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            onednn.EXTENSION.load(onednn._preload)
        yield caught, registered
    onednn.EXTENSION.load(onednn._preload)
    assert onednn.extension_loaded(), onednn.extension_error()


def test_a_refused_extension_registers_nothing_and_says_why(refused_onednn):
    caught, registered = refused_onednn
    assert registered == []
    assert not onednn.extension_loaded()
    assert "cannot accept" in onednn.extension_error() and "XLA FFI API" in onednn.extension_error()
    refused = [w for w in caught if issubclass(w.category, native_extension.ExtensionRefusedWarning)]
    assert len(refused) == 1 and "oneDNN extension was compiled against" in str(refused[0].message)


def test_rnn_falls_back_or_names_the_versions(refused_onednn):
    cfg = jcr.RNNConfig("lstm", 1, 4, 3)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jnp.ones((5, 2, 3))
    h0 = jnp.zeros(cfg.state_shape(2))
    y, _, _ = jcr.rnn(params, x, h0, h0, cfg)
    want, _, _ = jcr.rnn(params, x, h0, h0, cfg, implementation="xla")
    np.testing.assert_array_equal(np.asarray(y), np.asarray(want))
    with pytest.raises(
        RuntimeError,
        match=r"implementation='onednn' needs the oneDNN extension, which is not "
        r"loaded: .*XLA FFI API",
    ):
        jcr.rnn(params, x, h0, h0, cfg, implementation="onednn")
    assert float(jnp.sum(jnp.ones(3) + 1)) == 6.0


@pytest.mark.parametrize("name", ["cudnn", "onednn"])
def test_the_loaded_modules_record_an_accepted_build(name):
    """Both modules say what they were compiled against; in CI (an isolated build) that is the pinned floor."""
    extension = cudnn_extension if name == "cudnn" else onednn
    if not extension.extension_loaded():
        skip_or_fail(
            f"the {name} extension is not loaded: {extension.extension_error()}",
            REQUIRE_EXTENSION if name == "cudnn" else REQUIRE_ONEDNN,
        )
    module = extension.module()
    assert tuple(module.XLA_FFI_API_BUILD_VERSION) <= native_extension.running_xla_ffi_api_version()
    if os.environ.get("CI"):
        assert _build_floor() == module.JAXLIB_BUILD_VERSION
        assert tuple(module.XLA_FFI_API_BUILD_VERSION) == native_extension.XLA_FFI_API_OF_JAXLIB[_build_floor()]


def test_an_unknown_running_version_is_refused_by_name(monkeypatch):
    """Issue 51: neither the running jaxlib's headers nor its version tell its XLA FFI API: registering would be a
    guess that can break every computation, so nothing is registered and the reason says what could not be told."""
    monkeypatch.setattr(native_extension, "running_xla_ffi_api_version", lambda: None)
    monkeypatch.setattr(native_extension, "_jaxlib_version", lambda: "0.6.0")
    reason = native_extension.ffi_api_refusal("oneDNN extension", "cpu", _Module((0, 1), jaxlib="0.7.2"))
    assert reason is not None
    assert "XLA FFI API version of the running jaxlib (0.6.0) could not be told" in reason
    assert "none of the oneDNN extension's handlers (XLA FFI API 0.1, from jaxlib 0.7.2) were registered" in reason
    assert "on cpu" in reason and "jaxlib >= 0.7.2" in reason


def test_without_metadata_jaxlib_tells_its_own_version(monkeypatch):
    """A jaxlib without distribution metadata (built from source) and without headers: its own ``jaxlib.version``
    answers, and the table gives the FFI API version from it."""
    import jaxlib.version

    def no_metadata(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(native_extension.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(native_extension.importlib.metadata, "version", no_metadata)
    monkeypatch.setattr(jaxlib.version, "__version__", "0.9.2")
    assert native_extension._jaxlib_version() == "0.9.2"
    assert native_extension.running_xla_ffi_api_version() == (0, 2)


@contextlib.contextmanager
def _stale_load(name, monkeypatch, missing=None):
    """An extension reloaded as if it were left from a build of an older version, whose module lacks a target the
    Python side calls (``missing``; by default the oneDNN weights call, cuDNN's backward weights): (its loader, the
    extension module, the warnings its load gave, the FFI targets it tried to register). Reloaded as it was after the
    test."""
    if name == "onednn":
        extension, reload = onednn, lambda: onednn.EXTENSION.load(onednn._preload)
        missing, required = missing or onednn.WEIGHTS_TARGET, REQUIRE_ONEDNN
    else:
        extension, reload = cudnn_extension, cudnn_extension.load
        missing, required = missing or cudnn_extension.BACKWARD_WEIGHTS_TARGET, REQUIRE_EXTENSION
    if not extension.extension_loaded():
        skip_or_fail(f"the {name} extension is not loaded: {extension.extension_error()}", required)
    real = extension.module()
    stale = types.ModuleType(real.__name__)
    stale.__dict__.update({k: v for k, v in vars(real).items() if k != "registrations"})
    stale.registrations = lambda: {k: v for k, v in real.registrations().items() if k != missing}
    import_module = importlib.import_module
    registered = []
    with monkeypatch.context() as patch:
        patch.setattr(
            importlib, "import_module", lambda name, *a: stale if name == real.__name__ else import_module(name, *a)
        )
        patch.setattr(jax.ffi, "register_ffi_target", lambda *args, **kwargs: registered.append(args[0]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reload()
        yield extension, missing, caught, registered
    reload()
    assert extension.extension_loaded(), extension.extension_error()


@pytest.fixture(params=["onednn", "cudnn"])
def stale_extension(request, monkeypatch):
    with _stale_load(request.param, monkeypatch) as stale:
        yield stale


def test_a_module_that_lacks_a_target_is_refused_at_load(stale_extension):
    """Issue 51: a stale build's module used to load and register, then fail when a call was lowered; now it is
    refused at load, naming what it lacks, and the pure-JAX implementation runs."""
    extension, missing, caught, registered = stale_extension
    assert registered == []
    assert not extension.extension_loaded()
    error = extension.extension_error()
    assert f"lacks the FFI targets {missing}, which this version of jax_cudnn_rnn calls" in error
    assert "left from a build of an older version" in error and "--force-reinstall" in error
    refused = [w for w in caught if issubclass(w.category, native_extension.ExtensionRefusedWarning)]
    assert len(refused) == 1 and missing in str(refused[0].message)


@pytest.mark.parametrize("missing", onednn.TARGETS)
def test_a_onednn_module_that_lacks_any_target_it_calls_is_refused_at_load(missing, monkeypatch):
    """Issue 59: the required targets are every target kernels.py calls (``extension.TARGETS``), so that a build from
    before the matmul and gemm targets existed is refused at load by name, not at the first "onednn:gemm" lowering."""
    with _stale_load("onednn", monkeypatch, missing) as (extension, _, _, registered):
        assert registered == [] and not extension.extension_loaded()
        assert f"lacks the FFI targets {missing}, which this version of jax_cudnn_rnn calls" in (
            extension.extension_error()
        )


def test_a_module_that_lacks_an_attribute_is_refused_at_load():
    module = _Module((0, 1))
    module.registrations = dict
    incomplete = native_extension.NativeExtension(
        "jax_cudnn_rnn._onednn_rnn", "oneDNN extension", "cpu", "", "", targets=(), attributes=("buffer_sizes",)
    )._incomplete(module, {})
    assert "lacks the attributes buffer_sizes" in incomplete and "_onednn_rnn.so" in incomplete


def test_a_stale_onednn_module_leaves_the_default_on_xla(monkeypatch):
    cfg = jcr.RNNConfig("lstm", 1, 4, 3)
    params = jcr.init_params(jax.random.key(0), cfg)
    x, h0 = jnp.ones((5, 2, 3)), jnp.zeros(cfg.state_shape(2))
    with _stale_load("onednn", monkeypatch):
        y, _, _ = jcr.rnn(params, x, h0, h0, cfg)
        want, _, _ = jcr.rnn(params, x, h0, h0, cfg, implementation="xla")
    np.testing.assert_array_equal(np.asarray(y), np.asarray(want))
