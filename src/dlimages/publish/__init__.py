"""Built images to a registry: push (verified by digest; `pushplan` decides, `interrupts` handles signals), what a
published image holds (`report`), and how the packages of two sets of reports differ (`reportdiff`)."""
