"""OpenVINO on the CPU: one base (convert, cache, load), and the generator, parser and detector on it."""
