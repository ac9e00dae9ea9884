"""One place chooses what runs (issue 49): scripts/structure_metrics.py finds the module that defines the registry's
``decide`` and every other module that compares a value with an implementation's name, in any of its forms ("onednn",
"onednn:plain", "onednn+xla"); anything it finds outside ``ALLOWED`` fails here. Reads the source; imports nothing."""

import importlib.util
import os
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "structure_metrics.py")
_spec = importlib.util.spec_from_file_location("structure_metrics", SCRIPT)
structure_metrics = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(structure_metrics)

ALLOWED = {
    # Keras's use_cudnn names cuDNN itself; when both it and rnn()'s implementation are given, a contradiction between
    # the two requests is a ValueError. It compares the user's two arguments; what runs is the registry's choice.
    "jax_cudnn_rnn.keras": ["implementation == 'cudnn'"],
}


def test_no_module_but_the_registry_branches_on_an_implementation_name():
    found = structure_metrics.implementation_branches(os.path.join(ROOT, "jax_cudnn_rnn"))
    unexpected = {
        module: [line for line in lines if not any(allowed in line for allowed in ALLOWED.get(module, []))]
        for module, lines in found.items()
    }
    assert {module: lines for module, lines in unexpected.items() if lines} == {}
    assert structure_metrics.implementation_names(structure_metrics._sources(os.path.join(ROOT, "jax_cudnn_rnn"))) == {
        "xla",
        "reference",
        "cudnn",
        "onednn",
    }


def test_the_scan_finds_every_form_of_a_name(tmp_path):
    """A made-up package: a backend registered as "fast", and a module that branches on it in each form the registry
    takes, besides comparisons the scan must leave alone (a dict key that happens to be a name, another string)."""
    package = tmp_path / "pkg"
    (package / "backends").mkdir(parents=True)
    (package / "__init__.py").write_text("__all__ = []\n")
    (package / "backends" / "__init__.py").write_text("")
    (package / "backends" / "registry.py").write_text("def decide(name):\n    return name == 'fast'\n")
    (package / "backends" / "fast.py").write_text("registry.Backend('fast', None)\n")
    (package / "user.py").write_text(
        textwrap.dedent(
            """
            def pick(name, versions):
                if name == "fast:variant" or name in ("slow", "fast+xla"):
                    return 1
                if versions["fast"] > 3 or name != "slow":
                    return 2
            """
        )
    )
    found = structure_metrics.implementation_branches(str(package))
    assert list(found) == ["pkg.user"]
    assert found["pkg.user"] == ["line 3: name == 'fast:variant'", "line 3: name in ('slow', 'fast+xla')"]
