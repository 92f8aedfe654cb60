"""Running one session across processes: the xdist handshake (the controller's snapshot to its
workers), accelerator partitioning between workers, and pytest under ``torchrun``."""
