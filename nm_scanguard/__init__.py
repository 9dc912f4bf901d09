"""nm-scanguard: keep wpa_supplicant from background-scanning while Wi-Fi is busy."""

__version__ = "0.3.0~dev"
