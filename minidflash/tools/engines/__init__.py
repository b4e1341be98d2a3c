"""Engines: the bridge to llama.cpp (its binaries, its server, its converter)."""
