"""A learned router: a small classifier from a prompt to the drafter that served prompts like it
best, trained on counterfactual sessions (`specplay router train`; the labels: router_training/scores.py).

Features: hashed character n-grams of the prompt's lowercased head (log counts, scaled by their
inverse document frequency over the training prompts, the vector L2-normalised), beside a few
dense ones that carry what twenty prompts cannot teach (the heuristic's code score; whether the
prompt asks for text it gives to be rewritten or copied). Model: multinomial logistic regression
with an L2 penalty, fitted by full-batch accelerated gradient descent from zero weights, so the
same prompts and labels give the same router, bit for bit. Its classes are drafter names: the
default route map sends each to the drafter of that name. Pure numpy: reading and writing the file
it is kept in is router_training/router_file.py's job.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specplay.engine.routers.routing import CodeProseRouter

_HEURISTIC = CodeProseRouter()
_INSTRUCTION_END = re.compile(r"\n\s*\n|:\s*\n")
"""Where a prompt's instruction ends and the text it gives begins: a blank line, or a colon at a line's end."""
_EDIT_WORDS = re.compile(
    r"\b(rewrite|rephrase|reword|revise|edit|proofread|fix|correct|rename|refactor|reformat|convert|translate|"
    r"shorten|simplify|tidy|polish|put (?:this|it|the)|turn (?:this|it|the)|change (?:this|it|the)|"
    r"add type hints|return it in full|keeping|keep (?:its|the|all))\b"
)
"""Instructions that ask for the given text back, changed: its answer copies much of the prompt."""


def copy_request(prompt: str) -> float:
    """1.0 where the prompt's instruction asks for the text it gives to be rewritten (edited,
    fixed, renamed, returned in full...), else 0.0: prompt lookup's ground."""
    head = prompt[:2048]
    split = _INSTRUCTION_END.search(head)
    if split is None or len(head) - split.end() < 40:  # no given text to copy
        return 0.0
    return 1.0 if _EDIT_WORDS.search(head[: split.start()].lower()) else 0.0


def code_score(prompt: str) -> float:
    """The heuristic router's evidence for code (engine/routers/routing.py), its threshold subtracted."""
    return _HEURISTIC.score(prompt) - _HEURISTIC.threshold


UNTESTED = "was never tested against the heuristic"
"""A router fitted but not cross-validated: `--route auto` does not follow it."""

DENSE_FEATURES: Mapping[str, Callable[[str], float]] = {"code_score": code_score, "copy_request": copy_request}
"""Dense features by the name a router file records them under."""


@dataclass(frozen=True, slots=True)
class FeatureSettings:
    """How a prompt becomes a feature vector; a router file records them."""

    ngram_min: int = 1
    ngram_max: int = 4
    buckets: int = 4096
    """Hash buckets for the n-grams: a power of two."""
    sample_chars: int = 2048
    """The prompt's head that is read, as the heuristic reads it."""
    dense: tuple[str, ...] = tuple(DENSE_FEATURES)

    @property
    def width(self) -> int:
        return self.buckets + len(self.dense)

    def check(self) -> None:
        """Raises ValueError naming what is out of range (a damaged or foreign file)."""
        if not 1 <= self.ngram_min <= self.ngram_max <= 16:
            raise ValueError(f"n-gram lengths {self.ngram_min}..{self.ngram_max} (1..16)")
        if not 2 <= self.buckets <= 1 << 20 or self.buckets & (self.buckets - 1):
            raise ValueError(f"{self.buckets} buckets (a power of two up to 2^20)")
        if not 1 <= self.sample_chars <= 1 << 20:
            raise ValueError(f"a head of {self.sample_chars} characters")
        unknown = [name for name in self.dense if name not in DENSE_FEATURES]
        if unknown or len(set(self.dense)) != len(self.dense):
            raise ValueError(f"dense features {', '.join(self.dense)} (known: {', '.join(DENSE_FEATURES)})")


_FNV_PRIME = np.uint64(0x100000001B3)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_MIX_1, _MIX_2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_SHIFT = np.uint64(33)


def ngram_counts(prompt: str, settings: FeatureSettings) -> np.ndarray:
    """Counts of the head's character n-grams by hash bucket. The hash (FNV-1a over code points,
    then MurmurHash3's finaliser) is the same on every machine and run, unlike Python's `hash`,
    and runs vectorised: a 2 KB prompt takes tens of microseconds."""
    text = prompt[: settings.sample_chars].lower()
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    found = []
    for n in range(settings.ngram_min, settings.ngram_max + 1):
        starts = len(points) - n + 1
        if starts <= 0:
            break
        h = np.full(starts, _FNV_OFFSET ^ np.uint64(n), dtype=np.uint64)
        for j in range(n):
            h = (h ^ points[j : j + starts]) * _FNV_PRIME
        h ^= h >> _SHIFT
        h *= _MIX_1
        h ^= h >> _SHIFT
        h *= _MIX_2
        h ^= h >> _SHIFT
        found.append(h & np.uint64(settings.buckets - 1))
    if not found:
        return np.zeros(settings.buckets)
    return np.bincount(np.concatenate(found).astype(np.intp), minlength=settings.buckets).astype(np.float64)


def inverse_document_frequency(counts: np.ndarray) -> np.ndarray:
    """Smoothed idf of each bucket over the training prompts' counts (one row each):
    log((1 + n) / (1 + df)) + 1, so a bucket no prompt had still counts once."""
    seen_in = (counts > 0).sum(axis=0)
    return np.log((1 + len(counts)) / (1 + seen_in)) + 1


def features(counts: np.ndarray, prompts: Sequence[str], idf: np.ndarray, settings: FeatureSettings) -> np.ndarray:
    """Rows of [L2-normalised log-count tf-idf of the n-grams, dense features]."""
    weighted = np.log1p(counts) * idf
    norms = np.linalg.norm(weighted, axis=1, keepdims=True)
    weighted = weighted / np.where(norms > 0, norms, 1.0)
    dense = np.array([[DENSE_FEATURES[name](p) for name in settings.dense] for p in prompts], dtype=np.float64)
    return np.hstack([weighted, dense.reshape(len(prompts), len(settings.dense))])


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@dataclass(frozen=True, eq=False)
class LearnedRouter:
    """A router (engine/routers/routing.py's interface) whose classes are the drafters it was trained for."""

    classes: tuple[str, ...]
    settings: FeatureSettings
    idf: np.ndarray
    """(buckets,) float32."""
    weights: np.ndarray
    """(settings.width, classes) float32."""
    bias: np.ndarray
    """(classes,) float32."""
    label: str | None = "the learned router"
    """How route choices name it (its file: "the learned router r.json")."""
    trained_on: Mapping[str, Any] = field(default_factory=dict)
    """What it was fitted to (sessions, labels...), as its file records it."""
    min_confidence: float = 0.0
    """Below this probability of its class, the heuristic chooses (engine/routers/routing.py's fallback routing):
    the threshold cross-validation chose at training (router_training/train.py); 0: it always chooses."""
    unproven: str | None = UNTESTED
    """Why `--route auto` never follows it (routing.py's `Router.unproven`); None once training
    found its cross-validated picks beat the heuristic's (router_training/train.py)."""

    def probabilities(self, prompt: str) -> np.ndarray:
        """Each class's probability for `prompt`, in `classes` order."""
        counts = ngram_counts(prompt, self.settings)[None, :]
        x = features(counts, [prompt], self.idf.astype(np.float64), self.settings)
        return softmax(x @ self.weights.astype(np.float64) + self.bias.astype(np.float64))[0]

    def classify(self, prompt: str) -> str:
        return self.classes[int(np.argmax(self.probabilities(prompt)))]

    def confidence(self, prompt: str) -> float:
        return float(self.probabilities(prompt).max())


@dataclass(frozen=True, slots=True)
class FitSettings:
    l2: float = 1e-3
    """The penalty on the weights (not the biases), per training prompt's mean loss."""
    iterations: int = 2000


def fit_router(
    prompts: Sequence[str],
    targets: np.ndarray,
    classes: Sequence[str],
    settings: FeatureSettings = FeatureSettings(),
    fit: FitSettings = FitSettings(),
) -> LearnedRouter:
    """Multinomial logistic regression of `targets` (one row per prompt: a distribution over
    `classes`, spread evenly over drafters that tied for best) on the prompts' features.
    Nesterov's accelerated gradient with the step 1/L of the loss's smoothness bound, from zero,
    for a fixed number of steps: no randomness anywhere."""
    settings.check()
    if len(prompts) == 0 or targets.shape != (len(prompts), len(classes)):
        raise ValueError(f"targets of shape {targets.shape} for {len(prompts)} prompts and {len(classes)} classes")
    counts = np.stack([ngram_counts(p, settings) for p in prompts])
    idf = inverse_document_frequency(counts).astype(np.float32)
    x = features(counts, prompts, idf.astype(np.float64), settings)
    # The mean loss's gradient is Lipschitz with L <= max ||[x, 1]||^2 / 2 + l2 (softmax's Hessian <= I / 2).
    lipschitz = 0.5 * (float((x * x).sum(axis=1).max()) + 1.0) + fit.l2
    step = 1.0 / lipschitz
    params = np.zeros((x.shape[1] + 1, len(classes)))  # the last row: the biases
    x1 = np.hstack([x, np.ones((len(prompts), 1))])
    penalty = np.full((x.shape[1] + 1, 1), fit.l2)
    penalty[-1] = 0.0
    previous, momentum = params, params
    for t in range(fit.iterations):
        residual = (softmax(x1 @ momentum) - targets) / len(prompts)
        gradient = x1.T @ residual + penalty * momentum
        current = momentum - step * gradient
        momentum = current + (t / (t + 3)) * (current - previous)
        previous = current
    return LearnedRouter(
        classes=tuple(classes),
        settings=settings,
        idf=idf,
        weights=previous[:-1].astype(np.float32),
        bias=previous[-1].astype(np.float32),
    )
