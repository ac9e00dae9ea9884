"""What each extra of pyproject.toml brings, read from the file: the CPU demo no NVIDIA library (issue 31: a CPU
venv held 1.6 GB of cuDNN and cuBLAS it never loads), GPU users cuDNN through jax[cuda13], and CI's test extra the
cuDNN library its extension links."""

import os
import tomllib

from packaging.requirements import Requirement

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINUX_X86 = {"sys_platform": "linux", "platform_machine": "x86_64"}


def _extras() -> dict[str, list[str]]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def expand(extra: str, extras: dict[str, list[str]], environment: dict[str, str] = LINUX_X86) -> set[str]:
    """The requirements ``pip install ".[extra]"`` adds on ``environment`` (Linux x86_64, where every NVIDIA and
    oneDNN wheel applies), the package's references to its own extras (``jax-cudnn-rnn[cudnn]``) followed."""
    found = set()
    for line in extras[extra]:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({**environment, "extra": extra}):
            continue
        if requirement.name == "jax-cudnn-rnn":
            for inner in requirement.extras:
                found |= expand(inner, extras, environment)
        else:
            found.add(str(requirement).split(";")[0])
    return found


def _names(requirements: set[str]) -> set[str]:
    return {Requirement(r).name for r in requirements}


def test_expand_follows_the_packages_own_extras():
    extras = {"a": ["jax-cudnn-rnn[b]", "x>=1"], "b": ["y; sys_platform == 'win32'", "z"]}
    assert expand("a", extras) == {"x>=1", "z"}


def test_the_demo_brings_no_nvidia_library():
    demo = expand("demo", _extras())
    assert {"flax", "optax", "rich", "onednn-cpu-tbb", "tbb", "intel-cmplr-lib-rt"} <= _names(demo), demo
    nvidia = sorted(
        r
        for r in demo
        if Requirement(r).name.startswith("nvidia") or any(e.startswith("cuda") for e in Requirement(r).extras)
    )  # jax[cuda13] brings them too
    assert nvidia == [], f"the demo extra pulls NVIDIA libraries into a CPU venv: {nvidia}"


def test_gpu_users_get_cudnn_through_jax_cuda13():
    cuda = [Requirement(r) for r in expand("cuda", _extras())]
    assert [(r.name, r.extras) for r in cuda] == [("jax", {"cuda13"})]


def test_ci_test_extra_brings_the_cudnn_library_the_extension_links():
    # .ci/run sets JAX_CUDNN_RNN_REQUIRE_EXTENSION=1: the extension must load, which needs libcudnn.so.9.
    assert "nvidia-cudnn-cu13" in _names(expand("test", _extras()))
