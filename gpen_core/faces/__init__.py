"""The only room that knows facexlib and BGR: detect, screen, align, parse, mask, paste. Never imports a runtime."""
