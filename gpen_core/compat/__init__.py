"""Every patch of another library's internals, one module per library, each checking the version it was written for."""
