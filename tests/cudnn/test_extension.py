"""The native cuDNN module as far as a machine without a GPU can check it: it imports, registers every FFI target for
CUDA, answers honestly when asked something only a GPU can answer, and the op lowers for CUDA with the expected
custom calls.

Without the extension these tests skip; with JAX_CUDNN_RNN_REQUIRE_EXTENSION=1 (set in CI, which builds it) they fail
instead, so a silently skipped build cannot pass.
"""

import glob
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import native_extension as _native
from jax_cudnn_rnn.backends.cudnn import backend as cudnn_backend
from jax_cudnn_rnn.backends.cudnn import extension as _extension
from jax_cudnn_rnn.backends.cudnn import plan
from jax_cudnn_rnn.backends.fused.vjp import KernelArrays

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import require_extension  # noqa: E402

EXPECTED_TARGETS = {"jax_cudnn_rnn_forward", "jax_cudnn_rnn_backward_data", "jax_cudnn_rnn_backward_weights"}
HAS_GPU = any(d.platform == "gpu" for d in jax.devices())


@pytest.fixture
def native():
    """The loaded native module; skips (or fails under JAX_CUDNN_RNN_REQUIRE_EXTENSION=1) without it."""
    require_extension(_extension.EXTENSION, skips.REQUIRE_EXTENSION)
    return _extension.module()


def test_loaded_means_no_error(native):
    assert _extension.extension_loaded()
    assert _extension.extension_error() is None
    assert jcr.extension_loaded() and jcr.extension_error() is None


def test_every_target_registered(native):
    assert set(native.registrations()) == EXPECTED_TARGETS
    assert set(_extension.registered_targets()) == EXPECTED_TARGETS
    for capsule in native.registrations().values():
        assert type(capsule).__name__ == "PyCapsule"


def test_cudnn_version_is_9(native):
    assert 90000 <= native.CUDNN_BUILD_VERSION < 100000
    # The runtime library (the preloaded wheel's) must be the major version the module was built against.
    assert native.cudnn_version() // 10000 == native.CUDNN_BUILD_VERSION // 10000


def test_loads_through_its_rpath_alone(native):
    """Importing the .so by path in a fresh interpreter, without the ctypes preload, finds libcudnn.so.9 through
    the module's RUNPATH ($ORIGIN/../nvidia/cudnn/lib) when the package is installed into site-packages."""
    path = native.__file__
    if not os.path.isdir(os.path.join(os.path.dirname(path), "..", "nvidia", "cudnn", "lib")):
        pytest.skip(f"{path} is not installed next to nvidia/cudnn/lib (in-tree build)")
    code = (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location('_cudnn_rnn', sys.argv[1]); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(sorted(m.registrations()))"
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    result = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert "jax_cudnn_rnn_forward" in result.stdout


def test_links_no_shared_cuda_runtime(native):
    """cudart is linked statically: importing must not need libcudart.so (absent on machines with only jax[cpu])."""
    readelf = subprocess.run(["readelf", "-d", native.__file__], capture_output=True, text=True, check=False)
    if readelf.returncode != 0:
        pytest.skip("readelf unavailable")
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", readelf.stdout)
    assert "libcudnn.so.9" in needed
    assert not [lib for lib in needed if lib.startswith("libcudart")], needed


_CONFIG_FIELDS = dict(
    mode="lstm",
    num_layers=1,
    num_units=8,
    input_size=4,
    proj_size=0,
    direction="unidirectional",
    input_mode="linear_input",
    bias_mode="double",
    cell_clip=0.0,
    dtype="float32",
)


@pytest.mark.skipif(HAS_GPU, reason="checks the behaviour without a GPU")
def test_weight_params_needs_gpu(native):
    with pytest.raises(RuntimeError, match="weight_params needs a CUDA GPU"):
        native.weight_params(**_CONFIG_FIELDS)


@pytest.mark.skipif(HAS_GPU, reason="checks the behaviour without a GPU")
def test_temp_space_sizes_needs_gpu(native):
    for device in ({}, {"device": 0}, {"device": 3}):  # the current device, or a named CUDA ordinal
        with pytest.raises(RuntimeError, match="temp_space_sizes needs a CUDA GPU"):
            native.temp_space_sizes(
                **_CONFIG_FIELDS,
                allow_tf32=False,
                algorithm="standard",
                max_time=5,
                batch=2,
                padded=False,
                training=True,
                **device,
            )
    with pytest.raises(RuntimeError, match="weight_params needs a CUDA GPU"):
        native.weight_params(**_CONFIG_FIELDS, device=1)


def test_bad_dtype_named(native):
    with pytest.raises(ValueError, match="dtype is 'int8'"):
        native.weight_params(**{**_CONFIG_FIELDS, "dtype": "int8"})


def _inputs(cfg, T=6, B=3, seq_lengths=True):
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jnp.ones((T, B, cfg.input_size), cfg.dtype)
    h0 = jnp.zeros(cfg.state_shape(B), cfg.dtype)
    c0 = jnp.zeros(cfg.cell_shape(B), cfg.dtype) if cfg.has_cell_state else None
    lengths = jnp.array([T, 2, 1][:B], jnp.int32) if seq_lengths else None
    return params, x, h0, c0, lengths


@pytest.mark.skipif(HAS_GPU, reason="checks the behaviour without a GPU")
def test_rnn_cudnn_without_gpu_is_a_clear_error(native):
    cfg = jcr.RNNConfig(mode="gru", num_layers=1, num_units=8, input_size=4)
    params, x, h0, c0, _ = _inputs(cfg)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):  # where the call runs is not known: the GPU is missing
        jax.jit(lambda *a: jcr.rnn(*a, cfg, implementation="cudnn")).trace(params, x, h0, c0)
    with pytest.raises(RuntimeError, match="needs the arrays on a CUDA device"):  # an eager call on CPU arrays
        jcr.rnn(params, x, h0, c0, cfg, implementation="cudnn")


def test_rnn_cudnn_without_extension_says_how_to_build(monkeypatch):
    monkeypatch.setattr(_extension.EXTENSION, "_module", None)
    monkeypatch.setattr(
        _extension.EXTENSION, "_error", "the cuDNN extension is not part of this installation; " + _extension.BUILD_HINT
    )
    cfg = jcr.RNNConfig(mode="gru", num_layers=1, num_units=8, input_size=4)
    params, x, h0, c0, _ = _inputs(cfg)
    with pytest.raises(RuntimeError, match=re.escape("pip install --no-build-isolation -e .")):
        jax.jit(lambda *a: jcr.rnn(*a, cfg, implementation="cudnn")).trace(params, x, h0, c0)


def _custom_calls(fn, *args):
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return [line for line in text.splitlines() if "stablehlo.custom_call" in line]


def test_inference_lowering_for_cuda():
    """An undifferentiated call is one inference forward: no reserve space output, every attribute present."""
    cfg = jcr.RNNConfig(
        mode="lstm", num_layers=2, num_units=8, input_size=5, direction="bidirectional", proj_size=3, cell_clip=2.5
    )
    params, x, h0, c0, lengths = _inputs(cfg)
    static = cudnn_backend.Static(cfg, False, "standard")
    calls = _custom_calls(
        lambda p, x, h, c, n: cudnn_backend._rnn(KernelArrays(p, x, h, c), n, static), params, x, h0, c0, lengths
    )
    assert len(calls) == 1 and "@jax_cudnn_rnn_forward(" in calls[0]
    call = calls[0]
    for attribute in [
        'mode = "lstm"',
        "num_layers = 2 : i64",
        "num_units = 8 : i64",
        "input_size = 5 : i64",
        "proj_size = 3 : i64",
        'direction = "bidirectional"',
        'input_mode = "linear_input"',
        'bias_mode = "double"',
        "cell_clip = 2.500000e+00 : f64",
        "allow_tf32 = false",
        'algorithm = "standard"',
        "training = false",
    ]:
        assert attribute in call, attribute
    assert "%0:3 = " in call  # y, h_n, c_n: no reserve space
    assert "tensor<6x3x6xf32>" in call  # y is [T, B, D * proj_size]


def test_gradient_lowering_for_cuda(monkeypatch):
    """A differentiated call is a training forward, backward data and backward weights, the reserve space aliased
    through both backward passes. The reserve size (asked of cuDNN on a GPU) is replaced here by a fixed one."""
    monkeypatch.setattr(plan, "reserve_space_size", lambda *args: 4096)
    cfg = jcr.RNNConfig(mode="gru", num_layers=1, num_units=8, input_size=4)
    params, x, h0, _, lengths = _inputs(cfg)

    def loss(params, x, h0):
        y, h_n, _ = cudnn_backend._rnn(
            KernelArrays(params, x, h0, None), lengths, cudnn_backend.Static(cfg, False, "standard")
        )
        return jnp.sum(y) + jnp.sum(h_n)

    calls = _custom_calls(jax.grad(loss, argnums=(0, 1, 2)), params, x, h0)
    assert [re.search(r"@(\w+)\(", c).group(1) for c in calls] == [
        "jax_cudnn_rnn_forward",
        "jax_cudnn_rnn_backward_data",
        "jax_cudnn_rnn_backward_weights",
    ]
    # The reserve space travels as [B, ceil(4096 / B)] bytes (plan.reserve_row_bytes), flat at the custom call.
    assert "training = true" in calls[0] and f"tensor<{3 * -(-4096 // 3)}xui8>" in calls[0]
    assert "output_operand_aliases" in calls[1] and "operand_index = 5" in calls[1]
    assert "output_operand_aliases" in calls[2] and "operand_index = 3" in calls[2]


def test_dropout_runs_layer_by_layer_for_cuda(cudnn_traceable):
    cfg = jcr.RNNConfig(
        mode="rnn_tanh",
        num_layers=3,
        num_units=8,
        input_size=8,
        input_mode="skip_input",
        direction="bidirectional",
        dropout=0.5,
    )
    params, x, h0, c0, _ = _inputs(cfg)

    def loss(params):
        y, h_n, _ = jcr.rnn(
            params,
            x,
            h0,
            c0,
            cfg,
            is_training=True,
            dropout_key=jax.random.key(1),
            implementation="cudnn",
            algorithm="standard",
        )
        return jnp.sum(y) + jnp.sum(h_n)

    calls = _custom_calls(jax.grad(loss), params)
    forwards = [c for c in calls if "@jax_cudnn_rnn_forward(" in c]
    assert len(forwards) == 3 and all("num_layers = 1 : i64" in c for c in forwards)
    assert 'input_mode = "skip_input"' in forwards[0] and 'input_mode = "linear_input"' in forwards[1]
    assert len(calls) == 9


def test_installed_without_extension_reports_why():
    """Whatever this installation is, the two status functions agree and the error says something useful."""
    if _extension.extension_loaded():
        assert _extension.extension_error() is None
        assert glob.glob(os.path.join(os.path.dirname(_extension.module().__file__), "_cudnn_rnn*"))
    else:
        assert _extension.registered_targets() == ()
        assert "cuDNN extension" in _extension.extension_error()


def _lowered_for_cuda(fn, *args):
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def test_resets_lower_for_cuda_as_one_packed_call_with_an_xla_fallback(native, cudnn_traceable):
    """The cuDNN path with resets is one forward over the packed batch of max_segments rows (each segment a row, with
    the segments' lengths), under a conditional whose other branch is the xla implementation (no custom call)."""
    cfg = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=8, input_size=5, direction="bidirectional")
    params, x, h0, c0, lengths = _inputs(cfg)
    resets = jnp.zeros((6, 3), bool).at[2, 0].set(True)

    def run(params, x, h0, c0):
        return jcr.rnn(
            params,
            x,
            h0,
            c0,
            cfg,
            seq_lengths=lengths,
            resets=resets,
            max_segments=5,
            implementation="cudnn",
            algorithm="standard",
        )

    text = _lowered_for_cuda(run, params, x, h0, c0)
    calls = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    assert len(calls) == 1 and "@jax_cudnn_rnn_forward(" in calls[0]
    assert "tensor<6x5x5xf32>" in calls[0] and "tensor<5xi32>" in calls[0]  # x [T, max_segments, I], lengths
    assert "stablehlo.case" in text


@pytest.mark.parametrize("direction, calls_per_layer", [("unidirectional", None), ("bidirectional", 4)])
def test_long_sequences_lower_for_cuda_as_one_call_per_chunk(
    native, cudnn_traceable, monkeypatch, direction, calls_per_layer
):
    """With the step limit lowered to 4, T = 6 runs as chunks of 4 and 2 steps: the whole unidirectional stack per
    chunk; a bidirectional network layer by layer and direction by direction, each a unidirectional one-layer call."""
    monkeypatch.setattr(cudnn_backend, "MAX_TIME_STEPS", 4)
    cfg = jcr.RNNConfig(mode="gru", num_layers=2, num_units=8, input_size=5, direction=direction)
    params, x, h0, c0, lengths = _inputs(cfg)
    text = _lowered_for_cuda(
        lambda *a: jcr.rnn(*a, cfg, seq_lengths=lengths, implementation="cudnn", algorithm="standard"),
        params,
        x,
        h0,
        c0,
    )
    calls = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    steps = [int(re.search(r"\(tensor<(\d+)x3x", call).group(1)) for call in calls]
    if calls_per_layer is None:
        assert steps == [4, 2] and all("num_layers = 2 : i64" in call for call in calls)
    else:
        assert sorted(steps) == [2] * 4 + [4] * 4
        assert all('direction = "unidirectional"' in call and "num_layers = 1 : i64" in call for call in calls)


# ------------------------------------------------------------------------------ build/run-time version coupling

_BUILD = {"jaxlib": "0.7.2", "xla_ffi_api": (0, 1), "cudnn": 92801}


def test_format_cudnn_version():
    assert _extension.format_cudnn_version(92801) == "9.28.1"
    assert _extension.format_cudnn_version(91300) == "9.13.0"
    assert _extension.format_cudnn_version(None) == "unknown"


def test_same_versions_load_silently():
    assert _extension.check_versions(_BUILD, dict(_BUILD)) == (None, None)
    # A newer cuDNN at run time is what cuDNN's compatibility promises to work.
    assert _extension.check_versions(_BUILD, {**_BUILD, "cudnn": 93000}) == (None, None)


def test_older_runtime_cudnn_is_refused_with_what_to_install():
    refusal, note = _extension.check_versions(_BUILD, {**_BUILD, "cudnn": 91900}, "/x/libcudnn.so.9")
    assert note is None
    assert "built against cuDNN 9.28.1" in refusal and "is 9.19.0, which is older" in refusal
    assert "/x/libcudnn.so.9" in refusal and 'pip install "nvidia-cudnn-cu13>=9.28.1"' in refusal


def test_a_newer_jaxlib_loads_silently():
    """An isolated build compiles against the oldest jaxlib the package supports: every newer one is the normal case,
    not a note (the XLA FFI API versions are compared by the loader: tests/packaging/test_ffi_compat.py)."""
    running = {**_BUILD, "jax": "0.11.0", "jaxlib": "0.11.0", "xla_ffi_api": (0, 3)}
    assert _extension.check_versions(_BUILD, running) == (None, None)


class _FakeNative:
    """Stands in for the compiled module: what it was built against, and the cuDNN it finds at run time."""

    JAXLIB_BUILD_VERSION = "0.7.2"
    XLA_FFI_API_BUILD_VERSION = (0, 1)

    def __init__(self, build_cudnn, runtime_cudnn):
        self.CUDNN_BUILD_VERSION, self._runtime = build_cudnn, runtime_cudnn

    def cudnn_version(self):
        return self._runtime

    def registrations(self):
        return {}


def _load_with(monkeypatch, importer, skip_reason=None, available=True):
    """Loads a fresh cuDNN ``NativeExtension`` in place of ``_extension.EXTENSION`` (restored after the test), with
    ``importer`` in place of importing the compiled module and ``skip_reason`` as what the build recorded."""
    extension = _native.NativeExtension(
        _extension.EXTENSION.name,
        _extension.EXTENSION.what,
        "CUDA",
        _extension.BUILD_HINT,
        "JAX_CUDNN_RNN_CUDA",
        _extension.EXTENSION.library,
    )
    monkeypatch.setattr(extension, "available", lambda: available)
    monkeypatch.setattr(_native, "build_skip_reason", lambda option: skip_reason)
    monkeypatch.setattr(_native.importlib, "import_module", importer)
    monkeypatch.setattr(_extension, "EXTENSION", extension)
    _extension.load()


def test_loading_refuses_an_older_runtime_cudnn(monkeypatch):
    _load_with(monkeypatch, lambda name: _FakeNative(build_cudnn=92801, runtime_cudnn=91000))
    assert not _extension.extension_loaded()
    assert "which is older" in _extension.extension_error()
    assert 'pip install "nvidia-cudnn-cu13>=9.28.1"' in _extension.extension_error()


def test_loading_accepts_a_newer_runtime_cudnn(monkeypatch):
    _load_with(monkeypatch, lambda name: _FakeNative(build_cudnn=90000, runtime_cudnn=92801))
    assert _extension.extension_loaded()


def test_a_build_against_newer_headers_points_to_the_isolated_build():
    """A --no-build-isolation build against cuDNN 9.28 on a 9.19 runtime: the isolated build (cuDNN 9.12) would load.
    Below the floor no build would, and the message says only what to install."""
    refusal, _ = _extension.check_versions(_BUILD, {**_BUILD, "cudnn": 91900})
    assert "isolated build" in refusal and "compiles against cuDNN 9.12.0" in refusal
    refusal, _ = _extension.check_versions(_BUILD, {**_BUILD, "cudnn": 91100})
    assert "isolated build" not in refusal and 'pip install "nvidia-cudnn-cu13>=9.28.1"' in refusal


def _pyproject():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_the_build_pins_the_cudnn_floor_and_the_cudnn_extra_starts_there():
    """An isolated build compiles against exactly one cuDNN, the oldest supported: the extension's run-time floor.
    The `cudnn` extra may not allow anything older, and _extension.CUDNN_FLOOR names the same version."""
    pyproject = _pyproject()
    pins = [r for r in pyproject["build-system"]["requires"] if r.startswith("nvidia-cudnn-cu13")]
    assert len(pins) == 1 and re.match(r"nvidia-cudnn-cu13==(\d+)\.(\d+)\.(\d+)\.\d+;", pins[0]), pins
    major, minor, patch = map(int, re.match(r"nvidia-cudnn-cu13==(\d+)\.(\d+)\.(\d+)", pins[0]).groups())
    assert major * 10000 + minor * 100 + patch == _extension.CUDNN_FLOOR
    pinned = pins[0].split(";")[0].split("==")[1]
    extra = pyproject["project"]["optional-dependencies"]["cudnn"]
    assert len(extra) == 1 and extra[0].startswith(f"nvidia-cudnn-cu13>={pinned},<{major + 1};"), extra


def test_build_skip_reason_reaches_extension_error(monkeypatch):
    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    _load_with(
        monkeypatch, missing, skip_reason="no C++ compiler was found (install a C++17 compiler)", available=False
    )
    assert not _extension.extension_loaded()
    assert _extension.extension_error() == (
        "the cuDNN extension was not built when this package was installed: no "
        "C++ compiler was found (install a C++17 compiler). Reinstall after "
        "fixing that (JAX_CUDNN_RNN_CUDA=ON makes a missing dependency a build "
        "error)"
    )


def test_missing_libcudnn_says_what_to_install(monkeypatch):
    def no_cudnn(name):
        raise ImportError("libcudnn.so.9: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(_extension.native_extension, "preload", lambda distribution, filename: None)
    _load_with(monkeypatch, no_cudnn)
    assert 'pip install "jax-cudnn-rnn[cudnn]"' in _extension.extension_error()


def test_loaded_module_records_its_build(native):
    build = _extension.build_versions(native)
    assert build["jaxlib"] not in ("", "unknown")
    assert len(build["xla_ffi_api"]) == 2 and build["cudnn"] == native.CUDNN_BUILD_VERSION
    assert build["xla_ffi_api"] <= _native.running_xla_ffi_api_version()


def test_importing_the_source_checkout_says_so(monkeypatch):
    """`python -c "import jax_cudnn_rnn"` in the repository imports the uncompiled source tree, not the install."""

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(_native, "in_source_checkout", lambda: True)
    _load_with(monkeypatch, missing, available=False)
    assert "imported from the source checkout" in _extension.extension_error()
    assert "run from another directory" in _extension.extension_error()
