"""Collectors: spans and feedback into the trace store."""
