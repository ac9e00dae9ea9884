"""``swap_layers``: this package's Keras layers in place of Keras's in an existing model (model surgery through Keras's
own saving), and its report, ``Swap``. Public through jax_cudnn_rnn/keras.py, which imports Keras on JAX first."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import zipfile
from typing import Any

import keras

_SWAPPED = ("LSTM", "GRU", "SimpleRNN")  # Keras's classes, and ours registered as "jax_cudnn_rnn>" + the name


@dataclasses.dataclass(frozen=True)
class Swap:
    """One of Keras's ``LSTM``/``GRU``/``SimpleRNN`` layers that ``swap_layers`` met.

    ``path`` is where it is, as the names in the saved configuration: the enclosing models' and wrappers', then its
    own ("functional/bidirectional/forward_lstm"); ``class_name`` is "LSTM", "GRU" or "SimpleRNN"; ``kept`` is None
    when ours took its place, else why Keras's layer stays (what our constructor refuses in its configuration).
    """

    path: str
    class_name: str
    kept: str | None = None

    @property
    def replaced(self) -> bool:
        """Whether ours took the layer's place (``kept`` is None)."""
        return self.kept is None

    def __str__(self) -> str:
        return f"{self.path}: {self.class_name} " + ("replaced" if self.replaced else f"kept ({self.kept})")


def _swap_configs(node: Any, path: tuple[str, ...], swaps: list[Swap]) -> None:
    """Points every serialized ``keras.layers`` LSTM/GRU/SimpleRNN under ``node`` (a saved model's config, as JSON)
    at ours where ours takes its configuration, in place, and notes each in ``swaps``."""
    if isinstance(node, list):
        for item in node:
            _swap_configs(item, path, swaps)
        return
    if not isinstance(node, dict):
        return
    config = node.get("config")
    if isinstance(config, dict) and isinstance(node.get("class_name"), str):
        path = (*path, str(config.get("name", node["class_name"])))
        name = node["class_name"]
        if node.get("module") == "keras.layers" and name in _SWAPPED and node.get("registered_name") in (None, name):
            ours = {**node, "module": "jax_cudnn_rnn.keras", "registered_name": f"jax_cudnn_rnn>{name}"}
            try:  # our constructor decides: what it refuses stays Keras's
                keras.saving.deserialize_keras_object(ours)
            except (ValueError, TypeError) as error:
                swaps.append(Swap("/".join(path), name, str(error)))
            else:
                node.update(ours)
                swaps.append(Swap("/".join(path), name))
    for value in node.values():
        _swap_configs(value, path, swaps)


def swap_layers(
    model: Any, *, custom_objects: dict[str, Any] | None = None, compile: bool = True, safe_mode: bool = True
) -> tuple[Any, list[Swap]]:
    """Puts this module's LSTM, GRU and SimpleRNN in place of Keras's in an existing model, with its weights.

    ``model``: a ``keras.Model``, or the path of a saved model (a ``.keras`` file, or whatever
    ``keras.models.load_model`` reads). Every ``keras.layers.LSTM``/``GRU``/``SimpleRNN`` is replaced wherever it is:
    at the top, inside ``Bidirectional`` (both directions), ``TimeDistributed`` or nested models. A layer whose
    configuration ours do not take stays Keras's, and the report says why; nothing is refused. ``custom_objects``,
    ``compile`` and ``safe_mode`` are ``keras.models.load_model``'s.

    Returns ``(new_model, swaps)``: a new model (``model`` is left as it is) with the same configuration otherwise,
    the same weights and, when compiled, the same optimizer and its state; and one ``Swap`` per Keras RNN layer met,
    in the configuration's order (``swap.replaced``, ``swap.path``, ``swap.kept``: the reason).

    The model goes through Keras's own saving: its configuration is rewritten to name our classes and Keras loads
    the weights into them, by their place in the model. (``load_model(path, custom_objects={"LSTM": ...})`` does not
    do this: Keras resolves its own layers before custom objects.)
    """
    if not isinstance(model, (keras.Model, str, os.PathLike)):
        raise TypeError(f"model must be a keras.Model or the path of a saved model, got {type(model).__name__}")
    if compile not in (True, False) or safe_mode not in (True, False):
        raise TypeError(f"compile and safe_mode must be bools, got compile={compile!r}, safe_mode={safe_mode!r}")
    with tempfile.TemporaryDirectory() as folder:
        saved = os.path.join(folder, "model.keras")
        if isinstance(model, keras.Model):
            model.save(saved)
        elif str(model).endswith(".keras") and zipfile.is_zipfile(model):
            saved = os.fspath(model)
        else:  # a legacy .h5 file or another format Keras reads: loaded, then saved as .keras
            keras.models.load_model(model, custom_objects=custom_objects, compile=compile, safe_mode=safe_mode).save(
                saved
            )
        swapped = os.path.join(folder, "swapped.keras")
        with zipfile.ZipFile(saved) as source, zipfile.ZipFile(swapped, "w", zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                if info.filename == "config.json":
                    config = json.loads(source.read(info))
                    swaps: list[Swap] = []
                    _swap_configs(config, (), swaps)
                    target.writestr(info, json.dumps(config))
                else:
                    with source.open(info) as reading, target.open(info, "w") as writing:
                        shutil.copyfileobj(reading, writing)
        loaded = keras.models.load_model(swapped, custom_objects=custom_objects, compile=compile, safe_mode=safe_mode)
    return loaded, swaps
