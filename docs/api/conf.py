"""Sphinx configuration of the API reference and guide: ``sphinx-build -W docs/api build/docs`` documents the
installed package (an editable install: the checkout); tests/packaging/test_docs.py runs it, as CI does.

The reference is autodoc over every public module's ``__all__`` (Google-style docstrings through napoleon). The guide
pages are the README's sections, not copies: each page under guide/ holds one line, ``% readme-section: <heading>``,
and ``readme_section`` below replaces it at read time with that ``## <heading>`` section of README.md, its headings
lifted one level (``##`` -> ``#``) so that the section is the page. A README section that no page shows is an error,
so a new section cannot silently stay out of the docs. The contributors' page, extending.md, likewise includes
docs/extending.md.
"""

from __future__ import annotations

import os
import re
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
os.environ["KERAS_BACKEND"] = "jax"  # jax_cudnn_rnn.keras needs Keras on JAX (read at its first import)

project = "jax-cudnn-rnn"
author = "the jax-cudnn-rnn authors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
# __call__: how the modules and seed-style classes run. A page adds :inherited-members: where its classes keep the
# methods in a private base (models: _CudnnRNN; Flax, NNX and Equinox up to their framework's Module).
autodoc_default_options = {
    "members": True,
    "undoc-members": True,
    "member-order": "bysource",
    "special-members": "__call__",
}
autodoc_typehints = "signature"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields: autodoc documents the dataclass fields themselves
myst_heading_anchors = 3

_MARKER = re.compile(r"^% readme-section: (.+)$", re.MULTILINE)


def readme_sections(text: str) -> dict[str, str]:
    """{heading: body} of the README's ``## `` sections (the body without its heading line, up to the next ``## ``);
    the text before the first one under ""."""
    sections, heading, lines = {}, "", []
    fence = False
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            sections[heading] = "".join(lines)
            heading, lines = line[3:].strip(), []
        else:
            lines.append(line)
    sections[heading] = "".join(lines)
    return sections


def lift_headings(body: str) -> str:
    """Markdown headings one level up (``### x`` -> ``## x``), outside code fences."""
    out, fence = [], False
    for line in body.splitlines(keepends=True):
        if line.startswith("```"):
            fence = not fence
        out.append(line[1:] if not fence and re.match(r"#{2,6} ", line) else line)
    return "".join(out)


def readme_section(app: Any, docname: str, source: list[str]) -> None:
    """``source-read``: a page's ``% readme-section: <heading>`` line becomes that README section (``<heading>``
    ``intro`` is the text before the first section, without the title)."""
    match = _MARKER.search(source[0])
    if match is None:
        return
    with open(README, encoding="utf-8") as f:
        sections = readme_sections(f.read())
    wanted = match.group(1).strip()
    if wanted == "intro":
        body = re.sub(r"\A# [^\n]*\n", "", sections[""])
        source[0] = _MARKER.sub(lambda _: body, source[0])
        return
    if wanted not in sections:
        raise ValueError(f"{docname}: README.md has no section '## {wanted}'; it has {sorted(sections)[1:]}")
    source[0] = _MARKER.sub(lambda _: f"# {wanted}\n\n{lift_headings(sections[wanted])}", source[0])


def every_section_shown(app: Any, env: Any) -> list[str]:
    """``env-updated``: warns (an error under -W) about a README section that no guide page shows."""
    shown = set()
    guide = os.path.join(app.srcdir, "guide")
    for name in os.listdir(guide):
        with open(os.path.join(guide, name), encoding="utf-8") as f:
            shown.update(m.strip() for m in _MARKER.findall(f.read()))
    with open(README, encoding="utf-8") as f:
        missing = sorted(set(readme_sections(f.read())) - {""} - shown)
    if missing:
        from sphinx.util import logging

        logging.getLogger(__name__).warning(f"README.md sections that no page under guide/ shows: {missing}")
    return []


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", readme_section)
    app.connect("env-updated", every_section_shown)
    return {"parallel_read_safe": False}
