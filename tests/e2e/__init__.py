"""End-to-end tests with real clients (official SDKs, Pipecat, a browser) and the real models."""
