"""A node's state and the events that change it: one dataclass per event, the one reducer that folds them, and snapshots."""
