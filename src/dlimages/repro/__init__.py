"""The proof of reproducibility (`proof`: cold builds, compared) and the file-level comparison of two images
(`layerdiff` reads them, `comparison` is what it finds)."""
