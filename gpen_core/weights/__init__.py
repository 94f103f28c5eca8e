"""Which checkpoint files exist, where they are, whether they are the right bytes, and fetching them."""
