"""Stand-in for torch.utils: cpp_extension (load_inline) only."""
