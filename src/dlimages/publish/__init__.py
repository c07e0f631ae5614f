"""Built images to a registry: push (verified by digest), what a published image holds (`report`), and how the
packages of two sets of reports differ (`reportdiff`)."""
