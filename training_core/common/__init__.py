"""What every stage shares: atomic writes and folder locks, the console, the machine's faults."""
