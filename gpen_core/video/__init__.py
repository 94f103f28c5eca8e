"""Video: streams a clip through the engine frame by frame; imports the engine, never the UI.

Nothing heavy at import: PyAV is imported where a clip is opened (docs/video.md, "How a clip streams")."""
