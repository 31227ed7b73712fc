"""The experiments `reproduce` runs, by name, and the named groups of them."""

EXPERIMENTS = ("reference", "figure2", "figure3", "ictm2", "figure4", "figure5", "figure6", "figure7", "copy")
GROUPS = {"heads": ("figure4", "figure5", "figure6", "figure7"), "all": EXPERIMENTS}
