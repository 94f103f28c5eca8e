"""The only room that knows facexlib and BGR: detect, find (every face once), screen, align, parse, mask, paste. Never imports a runtime."""
