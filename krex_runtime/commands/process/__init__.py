"""Process mode: a command spawned as its own process tree, followed to its end."""
