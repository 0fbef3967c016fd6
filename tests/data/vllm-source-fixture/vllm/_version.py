__version__ = version = "9.9.0"
