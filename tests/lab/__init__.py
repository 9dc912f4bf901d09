"""The virtual Wi-Fi lab (see README.md in this directory)."""
