"""Around the engine: Ray batch and Ray Serve for work beyond one process."""
