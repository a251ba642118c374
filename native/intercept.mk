# Filled in by the interception library.
