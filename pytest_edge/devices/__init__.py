"""Where a backend's worker runs when it is not this machine: board farms (:mod:`.labgrid`)."""
