"""Code that runs inside tenant processes: the region client behind
`krex_runtime.client`, the context worker of pooled mode, the pooled entry
parser and the canary. Standard library only (an import-linter contract):
everything imported here is part of every candidate's baseline."""
