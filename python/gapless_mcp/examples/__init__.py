"""Example servers (``python -m gapless_mcp.examples.progress_server``)."""
