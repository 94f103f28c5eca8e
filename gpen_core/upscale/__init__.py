"""The whole-photo background upscaler, run in tiles that fit a memory budget."""
