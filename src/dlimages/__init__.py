"""dlimages: one declarative version matrix -> reproducible GPU deep-learning Docker images."""

__version__ = "0.1.0"
