"""Metric Card formulas as readable plain text, for pages that render no LaTeX (the report is
offline and runs no script, so no MathJax/KaTeX).

The cards write formulas in LaTeX between ``$...$`` (inline) and ``$$...$$`` (display).
:func:`plain_formulas` replaces each by Unicode text: ``\\mathrm{X}_n`` -> ``Xₙ``,
``\\frac{a}{b}`` -> ``a/b`` (``(a) / (b)`` when a side has operators), ``\\sum_{i=1}^{L}`` ->
``Σᵢ₌₁ᴸ``, Greek letters and relations by their symbols, ``\\left``/``\\big`` sizes dropped, a
``cases`` block as ``{ a if c; b otherwise }``.  Code spans and fenced code are left as they are
(``$AUTOMETRICS_MODELS_DIR`` there is not a formula).  A display formula keeps a line of its own
(Markdown hard breaks around it).  Characters Markdown would read as emphasis (``*``, ``_``) are
escaped, so the text renders as written.

Example::

    plain_formulas(r"$$\\mathrm{LengthRatio}(y, x) = \\frac{|y|}{\\max(1, |x|)}$$")
    # 'LengthRatio(y, x) = |y|/max(1, |x|)'
"""

from __future__ import annotations

import re

__all__ = ["plain_formulas", "latex_to_text"]

_SYMBOLS = {
    # Greek
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ϵ", "varepsilon": "ε", "zeta": "ζ", "eta": "η",
    "theta": "θ", "vartheta": "ϑ", "iota": "ι", "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν", "xi": "ξ", "pi": "π",
    "rho": "ρ", "sigma": "σ", "tau": "τ", "upsilon": "υ", "phi": "φ", "varphi": "φ", "chi": "χ", "psi": "ψ", "omega": "ω",
    "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Xi": "Ξ", "Pi": "Π", "Sigma": "Σ", "Phi": "Φ", "Psi": "Ψ",
    "Omega": "Ω",
    # operators and relations
    "sum": "Σ", "prod": "Π", "int": "∫", "cdot": " · ", "times": " × ", "pm": " ± ", "in": " ∈ ", "notin": " ∉ ",
    "mid": " | ", "le": " ≤ ", "leq": " ≤ ", "ge": " ≥ ", "geq": " ≥ ", "ne": " ≠ ", "neq": " ≠ ", "approx": " ≈ ",
    "sim": " ~ ", "propto": " ∝ ", "cap": " ∩ ", "cup": " ∪ ", "setminus": " ∖ ", "subset": " ⊂ ", "subseteq": " ⊆ ",
    "wedge": " ∧ ", "land": " ∧ ", "vee": " ∨ ", "lor": " ∨ ", "to": " → ", "rightarrow": " → ", "leftarrow": " ← ",
    "Rightarrow": " ⇒ ", "mapsto": " ↦ ", "emptyset": "∅", "varnothing": "∅", "infty": "∞", "partial": "∂",
    "nabla": "∇", "forall": "∀", "exists": "∃", "top": "⊤", "bot": "⊥", "ell": "ℓ", "dots": "…", "ldots": "…",
    "cdots": "⋯", "colon": ":", "lVert": "‖", "rVert": "‖", "Vert": "‖", "|": "‖", "lvert": "|", "rvert": "|",
    "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉", "langle": "⟨", "rangle": "⟩",
    # spacing
    ",": " ", ";": " ", ":": " ", " ": " ", "!": "", "quad": "  ", "qquad": "   ",
    # escaped characters
    "{": "{", "}": "}", "#": "#", "%": "%", "&": "&", "_": "_", "$": "$",
}
_FUNCTIONS = {"log", "ln", "exp", "min", "max", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "argmin", "argmax",
              "sup", "inf", "lim", "det", "dim", "deg", "gcd", "Pr"}
_TEXT = {"text", "mathrm", "textrm", "texttt", "mathtt", "textit", "mathit", "textbf", "mathbf", "boldsymbol",
         "operatorname", "mbox", "mathsf", "textsf", "boxed"}
_SIZES = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "middle",
          "displaystyle", "textstyle", "limits", "nolimits"}
_ACCENTS = {"hat": "\u0302", "widehat": "\u0302", "bar": "\u0304", "overline": "\u0305", "tilde": "\u0303",
            "widetilde": "\u0303", "vec": "\u20d7", "dot": "\u0307", "ddot": "\u0308"}
_FONTS = {
    "mathbb": dict(zip("1RNZQCE", "𝟙ℝℕℤℚℂ𝔼", strict=True)),
    "mathcal": dict(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "𝒜ℬ𝒞𝒟ℰℱ𝒢ℋℐ𝒥𝒦ℒℳ𝒩𝒪𝒫𝒬ℛ𝒮𝒯𝒰𝒱𝒲𝒳𝒴𝒵", strict=True)),
}
_SUB = dict(zip("0123456789+-=()aehijklmnoprstuvxβγρφχ", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓᵦᵧᵨᵩᵪ", strict=True))
_SUP = dict(zip("0123456789+-=()abcdefghijklmnoprstuvwxyzABDEGHIJKLMNOPRTUVWαβγδθιφχ⊤*′'",
                "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖʳˢᵗᵘᵛʷˣʸᶻᴬᴮᴰᴱᴳᴴᴵᴶᴷᴸᴹᴺᴼᴾᴿᵀᵁⱽᵂᵅᵝᵞᵟᶿᶥᵠᵡᵀ*′′", strict=True))
_OPENING = {"lVert", "lvert", "langle", "lfloor", "lceil"}
_CLOSING = {"rVert", "rvert", "rangle", "rfloor", "rceil"}
_OPERATOR = re.compile(r"[\s+\-−=<>≤≥,;/·×±∈∉∩∪∖→]")
_OPEN, _CLOSE = "([{", ")]}"


def _group(src: str, i: int) -> tuple[str, int]:
    """The argument starting at ``src[i]`` (spaces skipped): a ``{...}`` group's inside, a
    command with its name, or one character; and the index after it."""
    while i < len(src) and src[i] == " ":
        i += 1
    if i >= len(src):
        return "", i
    if src[i] == "{":
        depth, j = 0, i
        while j < len(src):
            if src[j] == "\\":
                j += 2
                continue
            depth += {"{": 1, "}": -1}.get(src[j], 0)
            if depth == 0:
                return src[i + 1:j], j + 1
            j += 1
        return src[i + 1:], len(src)
    if src[i] == "\\":
        m = re.match(r"\\([A-Za-z]+|.)", src[i:])
        return m.group(0), i + len(m.group(0))
    return src[i], i + 1


def _script(text: str, table: dict[str, str], mark: str) -> str:
    text = text.strip()
    if not text:
        return ""
    if all(c in table for c in text):
        return "".join(table[c] for c in text)
    if re.fullmatch(r"\w+", text) or len(text) == 1:
        return mark + text
    return f"{mark}({text})"


def _compound(text: str) -> bool:
    """Whether ``text`` has an operator or a space outside its brackets (``a + b``, ``Σⱼ w(x)``),
    unlike ``|y|`` or ``max(1, |x|)``."""
    depth, bars = 0, set()
    for ch in text:
        if ch in "|‖":  # |x| and ‖x‖ enclose like brackets
            bars ^= {ch}
        depth += (ch in _OPEN) - (ch in _CLOSE)
        if depth == 0 and not bars and _OPERATOR.match(ch):
            return True
    return False


def _fraction(num: str, den: str) -> str:
    num, den = num.strip(), den.strip()
    if not _compound(num) and not _compound(den):
        return f"{num}/{den}"
    return " / ".join(f"({s})" if _compound(s) else s for s in (num, den))


def _accent(text: str, mark: str) -> str:
    return text[:1] + mark + text[1:] if text else ""


def _cases(body: str) -> str:
    rows = []
    for row in re.split(r"\\\\", body):
        if not row.strip():
            continue
        value, _, cond = row.partition("&")
        value, cond = latex_to_text(value), latex_to_text(cond)
        rows.append(f"{value} {cond}" if cond.startswith(("otherwise", "if ")) else f"{value} if {cond}" if cond else value)
    return "{ " + "; ".join(rows) + " }"


def latex_to_text(src: str) -> str:
    """One LaTeX formula (without its ``$`` delimiters) as Unicode text."""
    text = re.sub(r"\s+", " ", _convert(src))
    text = re.sub(r" ([,;.)\]])", r"\1", text)  # "a , b" -> "a, b" where a symbol brought its own spaces
    text = re.sub(r"([(\[]) ", r"\1", text)
    return text.strip()


def _convert(src: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(src):
        c = src[i]
        if c == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", src[i:])
            name = m.group(1)
            i += len(m.group(0))
            if name in _OPENING:  # "\lVert x \rVert" is ‖x‖
                while i < len(src) and src[i] in " \t\n":
                    i += 1
            elif name in _CLOSING and out:
                out[-1] = out[-1].rstrip()
            if name in ("frac", "tfrac", "dfrac", "cfrac"):
                num, i = _group(src, i)
                den, i = _group(src, i)
                out.append(_fraction(latex_to_text(num), latex_to_text(den)) + " ")
            elif name in _TEXT:
                arg, i = _group(src, i)
                out.append(_convert(arg))  # its spaces kept: \text{ if }
            elif name == "sqrt":
                arg, i = _group(src, i)
                inner = latex_to_text(arg).strip()
                out.append("√" + (inner if len(inner) == 1 or re.fullmatch(r"\w+", inner) else f"({inner})"))
            elif name in _ACCENTS:
                arg, i = _group(src, i)
                out.append(_accent(latex_to_text(arg).strip(), _ACCENTS[name]))
            elif name in _FONTS:
                arg, i = _group(src, i)
                out.append("".join(_FONTS[name].get(ch, ch) for ch in latex_to_text(arg)))
            elif name == "begin":
                env, i = _group(src, i)
                end = src.find(f"\\end{{{env}}}", i)
                end = len(src) if end < 0 else end
                body = src[i:end]
                i = end + len(f"\\end{{{env}}}")
                out.append(_cases(body) if env.startswith("cases") else latex_to_text(body.replace("&", " ")))
            elif name == "end":
                _, i = _group(src, i)
            elif name in _SIZES:
                if i < len(src) and src[i] == ".":  # \left. / \right.: an invisible delimiter
                    i += 1
            elif name == "\\":
                out.append("; ")
            elif name in _SYMBOLS:
                out.append(_SYMBOLS[name])
            elif name in _FUNCTIONS:
                lead = " " if out and out[-1][-1:].isalnum() else ""
                out.append(lead + name + (" " if i < len(src) and src[i].isalnum() else ""))
            else:  # an unknown command: its name, without the backslash
                out.append(name)
        elif c in "^_":
            arg, i = _group(src, i + 1)
            out.append(_script(latex_to_text(arg), _SUP if c == "^" else _SUB, c))
        elif c == "{":
            arg, i = _group(src, i)
            out.append(_convert(arg))
        elif c == "}":
            i += 1
        elif c == "~":
            out.append(" ")
            i += 1
        elif c == "&":
            out.append(" ")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


_CODE = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]*`)", re.S)
_DISPLAY = re.compile(r"(\n?)[ \t]*\$\$(.+?)\$\$[ \t]*(\n?)", re.S)
_INLINE = re.compile(r"(?<![\\$])\$(?!\$)([^$\n]+?)(?<!\\)\$(?!\$)")


def _markdown_safe(text: str) -> str:
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_")


def _display(m: re.Match) -> str:
    before = "  \n" if m.group(1) else ""  # a line of its own: hard line breaks around it
    after = "  \n" if m.group(3) else ""
    return f"{before}{_markdown_safe(latex_to_text(m.group(2)))}{after}"


def plain_formulas(markdown: str) -> str:
    """``markdown`` with every ``$...$`` / ``$$...$$`` formula outside code replaced by Unicode
    text (see the module docstring)."""
    parts = _CODE.split(markdown)
    for k in range(0, len(parts), 2):  # even parts are outside code
        text = _DISPLAY.sub(_display, parts[k])
        parts[k] = _INLINE.sub(lambda m: _markdown_safe(latex_to_text(m.group(1))), text)
    return "".join(parts)
