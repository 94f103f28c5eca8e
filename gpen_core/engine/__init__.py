"""One request end to end: pipeline, model cache, memory budget, measured profiles."""
