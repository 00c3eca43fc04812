"""Bundled data: the demo dataset (``demo.json``) and the generator that writes it."""
