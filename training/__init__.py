"""Code that fits the weights and thresholds bargein ships (listening model, spoken-command models, endpoint tiers)."""
