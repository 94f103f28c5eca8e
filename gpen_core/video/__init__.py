"""Video: streams a clip through the engine frame by frame; imports the engine, never the UI.

Decode → find faces → steady them across frames → restore → paste → encode, with PyAV, the
networks resident and a bounded look-ahead (:mod:`gpen_core.video.stream`), so memory stays
flat however long the clip. Nothing heavy at import: PyAV is imported where a clip is opened.
"""
