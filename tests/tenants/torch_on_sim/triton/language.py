"""Stand-in for triton.language: the names a kernel's signature uses (a
stand-in kernel's body never runs)."""

constexpr = int
