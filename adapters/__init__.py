"""I/O with the outside world: Prometheus, the Kubernetes API and trace files."""
