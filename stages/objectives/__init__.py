"""Pre-training objectives: what each paradigm does to a batch of stored blocks before the model sees it.

An objective is a callable ``(rows, rng) -> batch``: ``rows`` is a ``uint16/uint32`` array of blocks from
the token-dataset stage, ``rng`` a ``numpy.random.Generator`` owned by the training loop (so masks are
drawn fresh every time a block is seen, and a resumed run draws the same ones), and ``batch`` a dict of
CPU ``torch`` tensors that the model's ``forward`` accepts, ``labels`` included. ``for_paradigm`` picks one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stages.tokenization.layout import BlockLayout


# T5's objectives (train.objective): its own span corruption and the alternatives in stages.objectives.denoisers.
T5_OBJECTIVES = ("span_corruption", "ul2", "prefix_lm", "reconstruct", "bart")
# BERT's: masked LM, ELECTRA's replaced-token detection (stages.objectives.electra), and masked LM with BERT's
# next-sentence or ALBERT's sentence-order prediction (stages.objectives.sentence_pairs).
BERT_OBJECTIVES = ("masked_lm", "electra", "nsp", "sop")
# GPT's: causal LM, and XLNet's permuted LM with two-stream attention (stages.objectives.permuted_lm).
GPT_OBJECTIVES = ("causal_lm", "permuted")


def for_paradigm(layout: "BlockLayout", **kwargs):
    """The objective of ``layout.paradigm`` (keyword arguments: that objective's settings)."""
    if layout.paradigm == "bert":
        objective = kwargs.pop("objective", "masked_lm") or "masked_lm"
        if objective not in BERT_OBJECTIVES:
            raise ValueError(f"objective: one of {', '.join(BERT_OBJECTIVES)} for bert; got {objective!r}")
        if objective == "electra":
            from stages.objectives.electra import ReplacedTokenDetection

            return ReplacedTokenDetection(layout, **kwargs)
        kwargs.pop("rtd_weight", None)
        if objective in ("nsp", "sop"):
            from stages.objectives.sentence_pairs import SentencePairs

            return SentencePairs(layout, task=objective, **kwargs)
        kwargs.pop("sentence_ends", None)
        from stages.objectives.masked_lm import MaskedLM

        return MaskedLM(layout, **kwargs)
    if layout.paradigm == "gpt":
        objective = kwargs.get("objective", "causal_lm") or "causal_lm"
        if objective not in GPT_OBJECTIVES:
            raise ValueError(f"objective: one of {', '.join(GPT_OBJECTIVES)} for gpt; got {objective!r}")
        if objective == "permuted":
            from stages.objectives.permuted_lm import PermutedLM

            return PermutedLM(layout)
        from stages.objectives.causal_lm import CausalLM

        return CausalLM(layout)
    if layout.paradigm == "t5":
        objective = kwargs.get("objective", "span_corruption")
        if objective not in T5_OBJECTIVES:
            raise ValueError(f"objective: one of {', '.join(T5_OBJECTIVES)}; got {objective!r}")
        if objective == "span_corruption":
            from stages.objectives.span_corruption import SpanCorruption

            return SpanCorruption(layout)
        from stages.objectives import denoisers

        if objective == "bart":
            return denoisers.TextInfilling(layout, sentence_ends=kwargs.get("sentence_ends", ()))
        return {"prefix_lm": denoisers.PrefixLM, "ul2": denoisers.UL2, "reconstruct": denoisers.Reconstruct}[
            objective](layout)
    raise ValueError(f"paradigm: expected bert, gpt or t5, got {layout.paradigm!r}")
