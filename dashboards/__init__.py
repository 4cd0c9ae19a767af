"""Dashboards: the built-in dashboard and Langfuse push."""
