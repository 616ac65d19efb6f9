"""The playground: a chat or completion sent through a running deployment's proxy, streamed back with its timings
and the Prefill and Decode that served it (docs/playground.md)."""
