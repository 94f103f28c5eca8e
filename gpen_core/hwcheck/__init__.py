"""Around the engine: the hardware check (per-mode needs measured on fresh Restorers), the measured advice,
self-check and machine info; the check's records and store live in the engine. Nothing at import."""
