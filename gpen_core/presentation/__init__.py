"""Around the engine: what the UI shows, as pure functions of results (no Gradio)."""
