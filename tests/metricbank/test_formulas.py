"""Metric Card formulas as plain text (metricbank/formulas.py): the report shows no LaTeX."""

from __future__ import annotations

import pytest
from autometrics.metricbank.formulas import latex_to_text, plain_formulas


@pytest.mark.parametrize(("latex", "text"), [
    (r"\mathrm{LengthRatio}(y, x) = \frac{|\mathrm{words}(y)|}{\max(1, |\mathrm{words}(x)|)}",
     "LengthRatio(y, x) = |words(y)|/max(1, |words(x)|)"),
    (r"\text{BARTScore}(x \to y) = \frac{1}{|y|}\sum_{t=1}^{|y|} \log p_\theta(y_t \mid y_{<t}, x)",
     "BARTScore(x → y) = 1/|y| Σₜ₌₁^(|y|) log p_θ(yₜ | y_(<t), x)"),
    (r"\text{BP} = \begin{cases} 1 & |c| > r^* \\ e^{1 - r^*/|c|} & \text{otherwise} \end{cases}",
     "BP = { 1 if |c| > r*; e^(1 - r*/|c|) otherwise }"),
    (r"\text{distinct}_n = \frac{a + b}{m - n + 1}, \qquad 0 \text{ if } m < n",
     "distinctₙ = (a + b) / (m - n + 1), 0 if m < n"),
    (r"F = \frac{2PR}{P + R + 10^{-8}}, \quad \mathrm{SARI} = 100 \cdot \tfrac{1}{3}\left(\overline{F_{keep}}\right)",
     "F = 2PR / (P + R + 10⁻⁸), SARI = 100 · 1/3 (F̅ₖₑₑₚ)"),
    (r"d_H(\varepsilon, \varepsilon) = \mathbb{1}[a_i \neq b_i], \; \min_{r \in \mathcal{R}'} \lVert x\rVert_2",
     "d_H(ε, ε) = 𝟙[aᵢ ≠ bᵢ], min_(r ∈ ℛ') ‖x‖₂"),
])
def test_latex_to_text(latex, text):
    assert latex_to_text(latex) == text


def test_plain_formulas_leaves_code_and_keeps_display_lines():
    md = ("Weights under `$AUTOMETRICS_MODELS_DIR/x` (regex `\\w+`); with $\\alpha = 0.9$:\n"
          "$$ P = \\frac{m}{|h|} $$\nand $r^*$ is the closest length.\n")
    out = plain_formulas(md)
    assert out == ("Weights under `$AUTOMETRICS_MODELS_DIR/x` (regex `\\w+`); with α = 0.9:  \n"
                   "P = m/|h|  \nand r\\* is the closest length.\n")  # * escaped: Markdown shows it as written
