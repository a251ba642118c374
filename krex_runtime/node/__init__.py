"""The facts of one GPU node the service starts from: its typed
configuration, its GPUs, where the native libraries are, file access for
tenants, and the claims that keep two runtimes off one GPU."""
