"""Adapters of the memory for LLM frameworks, each an optional extra: until a release, the wheel
``make dist`` builds, ``pip install "$(echo dist/django_memory-*.whl)[name]"``."""
