"""The application layer: what wires the search, the runner and the trace store together
(adapters, the store's observer, resuming), and the click-free functions the CLI calls."""
