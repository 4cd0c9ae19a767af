"""Dashboards: the built-in dashboard and Langfuse push (see issue 5)."""
