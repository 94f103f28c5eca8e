"""What the machine and this process are: CPU, memory, out-of-memory, the peak meter, files written into place. Imports only the contracts."""
