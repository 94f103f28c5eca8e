"""The networks in plain PyTorch (GPEN, ParseNet, RRDBNet) and how a checkpoint becomes one; no files, no faces."""
