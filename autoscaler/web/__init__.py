"""Everything that answers HTTP, one concept per module (``app.factory`` mounts the routes):

- ``external_metrics``: the ``external.metrics.k8s.io/v1beta1`` API on the secure port;
  ``responses`` builds its Kubernetes documents (discovery, ``metav1.Status``, metric lists).
- ``inspection`` (JSON, described by ``openapi``) and ``page`` (HTML, with ``charts``, and ``notes``:
  the forecast's notes in plain words): what is served and why, both reading ``views`` of the current
  snapshot; ``queued_views`` adds, beside each series, what waits in Kueue's queues in its pool
  (``queued_metrics`` puts that, and Kueue's own wait histograms, on ``/metrics``).
- ``probes``: ``/healthz``, ``/livez``, ``/readyz`` (state in ``readiness``) and ``/metrics``
  (``self_metrics``: the service's own registry).
- ``middleware``: Kubernetes-style errors, request metrics and authentication for every request;
  ``auth`` and ``kubernetes_auth`` decide who a caller is and what it may read.
- ``tls`` and ``certificates``: serving certificates (checked at start, reloaded when rotated) and
  cipher suites; ``demo_pki`` is the demo's local CA and kubeconfig, repaired when damaged;
  ``tls_accept`` runs the secure port's handshakes so refused client certificates are counted.
- ``http_server``: aiohttp's server answering what its parser refuses with ``metav1.Status`` (414,
  431, 501, 400) and no ``Server`` header; ``autoscaler.throttled_log`` bounds how often strangers are logged.
- ``keys``: the typed app state the routes share.
"""
