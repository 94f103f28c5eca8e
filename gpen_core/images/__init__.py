"""Hardened decode and encode of user files, and where results are written."""
