"""Tests of the listening policy: what is heard over a reply, the classifier, the fitted and spoken-command models."""
