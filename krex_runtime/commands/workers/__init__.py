"""The worker-pool base every mode's pool stands on: how the runtime starts,
keeps, retires, replaces and buries the processes it runs to serve commands
(worker_pool.py), and how their logs are kept (worker_logs.py). It knows no mode."""
