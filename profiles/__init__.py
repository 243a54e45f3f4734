"""The preset files as package data (``workbench.presets.profiles``); see ``workbench.presets.catalog``."""
