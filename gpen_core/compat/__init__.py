"""Every patch the engine makes to another library's internals, one module per library, each checking the version it was
written for (the app's Gradio seams are gpen_app's)."""
