"""Pushing to browsers: emit() over the channel layer after commit, and the read-only per-object websocket."""
