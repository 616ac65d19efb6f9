"""Drives AISBench (`ais_bench`) runs without Django: install check, config file, command line, progress,
output parsing and the verdict. Facts it relies on: docs/aisbench-facts.md."""
