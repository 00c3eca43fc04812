"""Evaluation (C14): scenario suites run k times and reported as pass^k, an
adversarial suite run with the compromised planner, and trace replay.

Modules: ``suite`` (the YAML format), ``fixtures`` (template stores, services),
``models`` (which model plays), ``player`` (plays the turns, observes the
state), ``matchers``, ``harm`` (harmful outcomes), ``judge`` (the five
dimensions), ``report``, ``runner`` (``signoff eval``) and ``replay``.
"""
