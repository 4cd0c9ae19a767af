"""Collectors: spans and feedback into the trace store (see issue 4)."""
