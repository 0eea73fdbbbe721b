'y'.repeat(20e6)
