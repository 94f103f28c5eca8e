"""Runtimes other than PyTorch (OpenVINO), on one shared base; the engine hands them to the faces."""
