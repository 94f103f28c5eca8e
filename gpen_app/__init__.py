"""The browser app's own parts beside ``app.py``: Gradio's seam, the tabs' wiring, and what the page shows, as
functions of gpen_core's results. It imports gpen_core; gpen_core never imports it (``.importlinter``)."""
