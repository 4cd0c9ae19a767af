"""Each metric in plain words, for rationales a reader without the Metric Cards understands:
"more distinct words than typical answers lowered the score" rather than
"DistinctNGrams.distinct4 = 1 lowered the score by 0.12" (the metric's name stays beside it).

A phrase names what a *higher* value of the metric means, to be read after "more"/"less" (or
"higher"/"lower" for a quantity); sub-scores (``ROUGE.rougeL``) take their metric's phrase.
"""

from __future__ import annotations

__all__ = ["plain_name", "plain_effect"]

# metric -> (phrase, comparative): "many" reads "more/fewer <phrase>", "more" reads
# "more/less <phrase>", "higher" reads "a higher/lower <phrase>"
_PHRASES: dict[str, tuple[str, str]] = {
    "BARTScore": ("likelihood under a summarisation model given the reference", "higher"),
    "BERTScore": ("meaning shared with the reference (contextual embeddings)", "more"),
    "BLEU": ("word sequences shared with the reference", "many"),
    "BLEURT": ("learned similarity to the reference", "higher"),
    "CIDEr": ("consensus with the references on informative words", "more"),
    "CharCut": ("character-level edits from the reference", "many"),
    "DistinctNGrams": ("distinct words and phrases", "many"),
    "FKGL": ("reading grade level", "higher"),
    "FactCC": ("factual consistency with the input", "more"),
    "FastTextEducationalValue": ("educational value", "more"),
    "FastTextNSFW": ("unsafe-for-work content", "more"),
    "FastTextToxicity": ("toxic language", "more"),
    "GLEU": ("word sequences shared with the reference (sentence level)", "many"),
    "GRMRewardModel": ("reward-model preference", "higher"),
    "HammingDistance": ("character positions differing from the reference", "many"),
    "INFORMRewardModel": ("reward-model preference", "higher"),
    "InfoLM": ("distance from the reference under a language model", "more"),
    "InputSimilarity": ("similarity to the input", "more"),
    "JaccardDistance": ("words not shared with the reference", "many"),
    "Jaro": ("character similarity to the reference", "more"),
    "JaroWinkler": ("character similarity to the reference (prefix-weighted)", "more"),
    "LDLRewardModel": ("reward-model preference", "higher"),
    "LENS": ("learned simplification quality", "higher"),
    "LENS_SALSA": ("learned simplification quality (no reference)", "higher"),
    "LengthRatio": ("length relative to the input", "higher"),
    "LevenshteinDistance": ("edits from the reference", "many"),
    "LevenshteinRatio": ("character similarity to the reference", "more"),
    "MAUVE": ("closeness to the references' distribution", "more"),
    "METEOR": ("words shared with the reference (with stems and synonyms)", "many"),
    "MathProcessRewardModel": ("step-by-step reasoning reward", "higher"),
    "MoverScore": ("meaning shared with the reference (embedding transport)", "more"),
    "NIST": ("informative word sequences shared with the reference", "many"),
    "NovelNGramRatio": ("new words and phrases not in the input", "many"),
    "OutputLength": ("length", "higher"),
    "ParaScore": ("paraphrase quality against the reference", "higher"),
    "ParaScoreFree": ("paraphrase quality (no reference)", "higher"),
    "Perplexity": ("surprise to a language model", "more"),
    "PseudoPARENT": ("content supported by the input and the reference", "more"),
    "ROUGE": ("words and phrases shared with the reference", "many"),
    "SARI": ("good simplification edits", "many"),
    "SelfBLEU": ("repetition across answers", "more"),
    "Sentiment": ("positive sentiment", "more"),
    "SummaQA": ("answerable questions about the input", "many"),
    "TER": ("edits needed to reach the reference", "many"),
    "Toxicity": ("toxic language", "more"),
    "UniEval-Dialogue": ("dialogue quality (learned)", "higher"),
    "UniEval-Fact": ("factual consistency (learned)", "higher"),
    "UniEval-Sum": ("summary quality (learned)", "higher"),
    "UpdateROUGE": ("words shared with the reference beyond the input", "many"),
    "YiSi": ("meaning shared with the reference (weighted words)", "more"),
    "YiSi-2": ("meaning shared with the input across languages", "more"),
    "chrF++": ("characters and words shared with the reference", "many"),
    "iBLEU": ("overlap with the reference while differing from the input", "more"),
}


def plain_name(feature: str) -> tuple[str, str] | None:
    """(phrase, comparative) of a metric feature (``BLEU``, ``ROUGE.rougeL``), None when unknown
    (an LLM judge's criterion, a code metric)."""
    return _PHRASES.get(feature) or _PHRASES.get(feature.split(".", 1)[0])


def plain_effect(feature: str, above_typical: bool, raised: bool) -> str | None:
    """One clause: "more distinct words and phrases than typical answers lowered the score";
    None when the metric has no phrase."""
    p = plain_name(feature)
    if p is None:
        return None
    phrase, comp = p
    if comp in ("more", "many"):
        amount = f"{'more' if above_typical else ('fewer' if comp == 'many' else 'less')} {phrase}"
    else:
        amount = f"a {'higher' if above_typical else 'lower'} {phrase}"
    return f"{amount} than typical answers {'raised' if raised else 'lowered'} the score"
