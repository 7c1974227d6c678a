"""Deterministic replay of Kubernetes scheduler traces through a model of list-watch delay.

The package is a library first; the ``replay`` command line is a thin layer over it.
"""

__version__ = "0.1.0"
