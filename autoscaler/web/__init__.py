"""Everything that answers HTTP, in four rooms (``app.factory`` mounts the routes; ``app.api_loop`` runs the
HPA's path on a thread and event loop of its own):

- ``api``: the HPA's path, the ``external.metrics.k8s.io/v1beta1`` API on the secure port. Nothing the ops
  port does is imported here, so nothing of it can sit on this path.
- ``ops``: the plain port's pages and data: the inspection API, the page and its charts, the views of the
  current snapshot they read, and the collectors that put the scorecard, targets and launches on
  ``/metrics``.
- ``shared``: what both ports run: the server (``http_server``), middleware, ``metav1.Status`` documents,
  probes and readiness, the service's own metrics and the typed app state.
- ``security``: TLS, certificates and who a caller is and what it may read, imported by both ports and by
  KEDA's gRPC port.
"""
