"""Every view, one module per format: renderers over the diagnostic and finding models, the
program (`show`), and an execution's `Timing` (`timeline.py`, drawn by `svg.py` and
`chrome_trace.py`; `replay_text.py`). Nothing imports this package but the CLI."""
