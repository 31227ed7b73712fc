"""Console entry points, one module per command."""
