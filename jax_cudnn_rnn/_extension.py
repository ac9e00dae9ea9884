"""Loads the native cuDNN module if it was built (placeholder until the extension lands: never loaded)."""


def extension_loaded() -> bool:
    return False


def extension_error() -> str | None:
    return "the cuDNN extension is not part of this build"
