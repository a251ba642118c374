"""Support for tests and benchmarks, not part of the service: a runtime
started as a subprocess (`local_runtime`) and the checks that nothing was
left behind (`hygiene`)."""
