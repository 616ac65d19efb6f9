"""Simulated Ascend PD cluster on one machine (no Django import)."""
