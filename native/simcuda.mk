# Filled in by the simulated driver.
