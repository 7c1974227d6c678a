from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay.quantity import QuantityError, parse_quantity, to_milli, to_units


@pytest.mark.parametrize("text, milli", [
    ("500m", 500), ("2", 2000), ("0.5", 500), ("1.5", 1500), ("100u", 1), ("1e3", 1_000_000),
    ("1E-3", 1), ("+3", 3000), (".5", 500), ("1k", 1_000_000), (2, 2000), (0.25, 250),
])
def test_milli_values(text, milli):
    assert to_milli(text) == milli


@pytest.mark.parametrize("text, units", [
    ("1Gi", 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9), ("1.5Gi", 3 * 2**29), ("128974848", 128974848),
    ("129e6", 129_000_000), ("123Mi", 123 * 2**20), ("1Ki", 1024), ("0.5", 1), ("1m", 1),
])
def test_unit_values_round_up(text, units):
    assert to_units(text) == units


@pytest.mark.parametrize("bad", ["", "Gi", "1.2.3", "1Gb", "abc", "1 Gi", "--1", "1e", True, float("nan"), "1e99"])
def test_rejects_what_kubernetes_rejects(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "": 1, "k": 10**3, "M": 10**6,
            "G": 10**9, "m": Fraction(1, 1000), "u": Fraction(1, 10**6), "n": Fraction(1, 10**9)}


@given(st.integers(0, 10**6), st.sampled_from(sorted(SUFFIXES)))
def test_integer_with_any_suffix(number, suffix):
    assert parse_quantity(f"{number}{suffix}") == number * SUFFIXES[suffix]


@given(st.integers(0, 10**6), st.integers(-9, 9))
def test_decimal_exponent(number, exponent):
    assert parse_quantity(f"{number}e{exponent}") == number * Fraction(10) ** exponent


@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_decimal_fraction_rounds_up_to_milli(whole, frac):
    text = f"{whole}.{frac:09d}"
    assert to_milli(text) == -((-Fraction(text) * 1000) // 1)
