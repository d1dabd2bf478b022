"""orch: rebuild GPU machine-learning environments in containers and prove they still do what the reference did."""

__version__ = "0.1.0"
