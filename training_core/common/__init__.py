"""What every stage shares: atomic writes and folder locks, the console, faults, the HTML pages."""
