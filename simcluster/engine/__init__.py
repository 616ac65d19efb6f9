"""Engine emulator speaking vLLM's HTTP surface and the PD kv_transfer_params protocol."""
