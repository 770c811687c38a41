"""Renderers over the diagnostic and finding models. Nothing imports this package but the CLI."""
