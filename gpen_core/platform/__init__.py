"""What the machine and this process are: CPU, memory, out-of-memory, the peak meter. Imports only the contracts."""
