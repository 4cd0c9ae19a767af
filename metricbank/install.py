"""How to install what is missing, said one way wherever it is shown (a metric's error, the
report, the CLI), as README.md says it: the package is not on PyPI, so an extra comes from the
autometrics-sdk checkout (``pip install ".[models]"``), and torch is pinned and installed first
(``pip install "torch==2.13.0"``: an unpinned torch pulls a multi-GB CUDA build).

A hint is Markdown: each command in backticks, so the Markdown and HTML reports show it as code;
plain-text outlets (the terminal) drop the backticks with :func:`plain`.
"""

from __future__ import annotations

import importlib.util
import re

__all__ = ["TORCH_PIN", "install_hint", "plain"]

#: the torch README.md installs first (a CPU wheel)
TORCH_PIN = "torch==2.13.0"
#: extras that bring torch (through transformers / sentence-transformers)
_TORCH_EXTRAS = frozenset({"models", "llm"})


def _requirement(req: str) -> str:
    return f'"{req}"' if re.search(r"[<>=!~\[;]", req) else req


def install_hint(*packages: str, extra: str | None = None) -> str:
    """``run `pip install ...` `` for the missing ``packages`` (pip names, with a version bound
    where one matters) or the package's ``extra``; torch pinned and first whenever it is to be
    installed.  With both, the packages alone are the quicker fix and the extra the complete one."""
    missing_torch = "torch" in packages or (extra in _TORCH_EXTRAS and importlib.util.find_spec("torch") is None)
    rest = [p for p in dict.fromkeys(packages) if p != "torch"]
    steps = []
    if missing_torch:
        steps.append(f'`pip install "{TORCH_PIN}"` first (the CPU wheel; an unpinned torch pulls a multi-GB CUDA build)')
    if rest:
        steps.append(f"`pip install {' '.join(_requirement(p) for p in rest)}`")
    checkout = f'`pip install ".[{extra}]"` in the autometrics-sdk checkout (the package is not on PyPI)' if extra else None
    if checkout and not rest:
        steps.append(checkout)
    text = "run " + ", then ".join(steps) if steps else ""
    if checkout and rest:
        text += f" (or {checkout})"
    return text


def plain(text: str) -> str:
    """A hint (or any Markdown-ish message) for a plain-text outlet: code spans without backticks."""
    return re.sub(r"`([^`\n]+)`", r"\1", str(text))
