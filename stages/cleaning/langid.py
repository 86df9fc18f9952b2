"""Language identification for C4's English filter (TFDS ``c4_utils.is_language``: langdetect, seed 0, says ``en``
with probability >= 0.99), whose counters, in its order, are the reasons: "langdetect_exception", "no_predictions",
"low_confidence", "not_english:<lang>". Backends, loaded once per process: ``langdetect`` (run by the bit-identical
Rust port ``langdetect-rs`` when installed, unless ``LMPIPE_LANGDETECT=python``; benchmarks/cleaning.md) and the
faster ``py3langid`` (calibrated differently: ``benchmarks/cleaning_agreement.py``).
"""

from __future__ import annotations

import importlib.util
import os
import threading

from stages.cleaning.base import Doc, Filter

BACKENDS = ("langdetect", "py3langid")


class Undetectable(Exception):
    """No prediction for a text; its message is one of C4's reasons ("langdetect_exception", "no_predictions")."""


class LangID:
    """A language identifier: the best language of a text and its probability."""

    def best(self, text: str) -> tuple[str, float]:
        """Best (language, probability); raises :class:`Undetectable` when there is none."""
        raise NotImplementedError

    def detect(self, text: str) -> tuple[str, float] | None:
        """Best (language, probability), or None when the text is undetectable."""
        try:
            return self.best(text)
        except Undetectable:
            return None


class LangdetectID(LangID):
    """langdetect exactly as C4 calls it (``detect_langs`` with seed 0); codes like "en", "zh-cn"."""

    def __init__(self) -> None:
        wanted = os.environ.get("LMPIPE_LANGDETECT", "auto")
        if wanted not in ("auto", "python", "rust"):
            raise ValueError(f"LMPIPE_LANGDETECT: one of auto, python, rust; got {wanted!r}")
        found = importlib.util.find_spec("langdetect_rs") is not None
        if wanted == "rust" and not found:
            raise ValueError("LMPIPE_LANGDETECT=rust: the langdetect-rs package is not installed")
        self.engine = "langdetect-rs" if found and wanted != "python" else "langdetect"
        package = self.engine.replace("-", "_")
        detector_factory = importlib.import_module(f"{package}.detector_factory")
        detector_factory.init_factory()  # loads the 55 profiles; callers hold the module lock
        self._factory = detector_factory._factory
        self._error = importlib.import_module(f"{package}.lang_detect_exception").LangDetectException

    def best(self, text: str) -> tuple[str, float]:
        try:
            # detect_langs() with the seed set on this detector rather than globally.
            detector = self._factory.create()
            detector.seed = 0
            detector.append(text)
            predictions = detector.get_probabilities()
        except self._error:  # e.g. "No features in text." for empty, digits-only or symbol-only text
            raise Undetectable("langdetect_exception") from None
        if not predictions:  # every language at or below langdetect's 0.1 reporting threshold
            raise Undetectable("no_predictions")
        return predictions[0].lang, float(predictions[0].prob)


class Py3LangidID(LangID):
    """py3langid with normalised probabilities; ISO 639-1 codes ("en", "zh")."""

    def __init__(self) -> None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        # What a text with no known byte n-gram gets: every label alike (script aliases folded).
        self._featureless = self._identifier.rank("")

    def best(self, text: str) -> tuple[str, float]:
        ranked = self._identifier.rank(text)
        # The featureless ranking and "zxx" ("no linguistic content") are not predictions.
        if ranked == self._featureless or ranked[0][0] == "zxx":
            raise Undetectable("no_predictions")
        return ranked[0][0], float(ranked[0][1])


_instances: dict[str, LangID] = {}
_lock = threading.Lock()


def get_langid(backend: str = "langdetect") -> LangID:
    """The process-wide ``backend`` identifier, loaded once under a lock (langdetect's loader is not thread-safe)."""
    if backend not in _instances:
        if backend not in BACKENDS:
            raise ValueError(f"unknown language-ID backend {backend!r}; expected one of {BACKENDS}")
        with _lock:
            if backend not in _instances:
                _instances[backend] = (LangdetectID if backend == "langdetect" else Py3LangidID)()
    return _instances[backend]


def detect(text: str, *, backend: str = "langdetect") -> tuple[str, float] | None:
    """Best (language, probability) of ``text``, or None when it is undetectable."""
    return get_langid(backend).detect(text)


def is_english(text: str, *, min_probability: float = 0.99,
               backend: str = "langdetect") -> tuple[bool, str]:
    """C4's English page filter: (keep, reason), reason "ok" or one of C4's counters (module docstring)."""
    try:
        lang, prob = get_langid(backend).best(text)
    except Undetectable as exc:
        return False, str(exc)
    if prob < min_probability:  # C4 checks confidence before language
        return False, "low_confidence"
    if lang != "en":
        return False, f"not_english:{lang}"
    return True, "ok"


class LanguageFilter(Filter):
    """C4's English filter: drops a page whose language is not English with ``cfg.min_probability``."""

    name = "language"

    def apply(self, doc: Doc) -> str | None:
        keep, reason = is_english(doc.text, min_probability=self.cfg.min_probability, backend=self.cfg.backend)
        return None if keep else reason
