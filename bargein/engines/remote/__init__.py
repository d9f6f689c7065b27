"""Stages served by Ray Serve deployments (``pip install bargein[ray]``), chosen per stage by settings."""
