"""Kubernetes resource quantities (``500m``, ``2``, ``1Gi``, ``512Mi``, ``1e3``) as exact integers.

Follows ``k8s.io/apimachinery/pkg/api/resource``: a signed decimal number followed by a binary-SI
suffix (Ki .. Ei), a decimal-SI suffix (n, u, m, "", k, M, G, T, P, E) or a decimal exponent
(``e3``, ``E-2``).  Like Kubernetes' ``Value()`` and ``MilliValue()``, conversion to an integer
rounds up, so a request is never understated.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?\d+))?"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity; JSON numbers (``2``, ``0.5``) are accepted as they are."""
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"not a quantity: {text!r}")
        return Fraction(str(text))
    match = _QUANTITY.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"not a quantity: {text!r}")
    number = Fraction(match["number"])
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > 30:
            raise QuantityError(f"quantity exponent out of range: {text!r}")
        return number * Fraction(10) ** exponent
    suffix = match["suffix"] or ""
    return number * (_BINARY.get(suffix) or _DECIMAL[suffix])


def to_milli(text: str | int | float) -> int:
    """A quantity in thousandths, rounded up (how cpu and gpu requests are counted)."""
    return math.ceil(parse_quantity(text) * 1000)


def to_units(text: str | int | float) -> int:
    """A quantity in whole units, rounded up (how memory requests are counted, in bytes)."""
    return math.ceil(parse_quantity(text))
