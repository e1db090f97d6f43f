"""The test zoo: small healthy cases and broken twins that the diagnostics must pass or flag."""
